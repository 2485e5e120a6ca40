// trainer.json as resume and sample read it: the fields keel wrote, each checked by type and
// range, and the cursor checked against the step that produced it.
#include "train/trainer_json.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "data/batch.h"
#include "ir/error.h"

namespace keel::train {
namespace {

using nlohmann::json;

// A value as the message shows it: its JSON, cut short so the error stays one line.
std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() <= 40 ? s : s.substr(0, 37) + "...";
}

class JsonFields {
 public:
  JsonFields(const json& j, const std::string& source) : j_(j), source_(source) {}

  [[noreturn]] void bad(const std::string& field, const std::string& what) const {
    throw InputError(fmt::format("[checkpoint] {}: field \"{}\" {}", source_, field, what));
  }
  const json& at(const std::string& field) const {
    auto it = j_.find(field);
    if (it == j_.end()) {
      bad(field,
          "is missing (keel writes step, cursor, config, accum and seed); the checkpoint is "
          "damaged or was not written by keel train");
    }
    return *it;
  }
  // An integer in [min, INT64_MAX].
  int64_t integer(const std::string& field, int64_t min) const {
    const json& v = at(field);
    const bool fits = v.is_number_integer() &&
                      !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX));
    if (!fits || v.get<int64_t>() < min) {
      bad(field, fmt::format("must be an integer >= {}, found {}", min, shown(v)));
    }
    return v.get<int64_t>();
  }
  uint64_t unsigned_integer(const std::string& field) const {
    const json& v = at(field);
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0)) {
      bad(field, fmt::format("must be an integer >= 0, found {}", shown(v)));
    }
    return v.get<uint64_t>();
  }
  // The text of an object field, for the parser of that object.
  std::string object(const std::string& field) const {
    const json& v = at(field);
    if (!v.is_object()) bad(field, fmt::format("must be an object, found {}", shown(v)));
    return v.dump();
  }
  std::string where(const std::string& field) const {
    return fmt::format("{} field \"{}\"", source_, field);
  }

 private:
  const json& j_;
  const std::string& source_;
};

// The loader hands out accum x batch rows per step, so a cursor keel wrote is exactly that
// times the step; anything else was edited or damaged, and resuming it would read other data.
void check_cursor(const TrainerJson& s, const JsonFields& f) {
  int64_t rows = 0;
  const bool overflow = __builtin_mul_overflow(s.step, s.accum, &rows) ||
                        __builtin_mul_overflow(rows, s.config.batch, &rows);
  if (!overflow && rows == s.cursor.row) return;
  f.bad("cursor",
        fmt::format("row {} is not the {} rows that step {} x accum {} x batch {} read; the "
                    "cursor and the step disagree (the checkpoint is damaged or was edited)",
                    s.cursor.row, overflow ? std::string("more than int64") : std::to_string(rows),
                    s.step, s.accum, s.config.batch));
}

}  // namespace

TrainerJson read_trainer_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("[checkpoint] {}: not JSON (parse error at byte {})", source,
                                 e.byte > 0 ? e.byte - 1 : 0));
  } catch (const json::out_of_range&) {  // a number beyond double, "1e400"
    throw InputError(fmt::format("[checkpoint] {}: a number is out of range", source));
  }
  if (!j.is_object()) {
    throw InputError(
        fmt::format("[checkpoint] {}: must be a JSON object, found {}", source, shown(j)));
  }
  const JsonFields f(j, source);
  TrainerJson s;
  s.step = f.integer("step", 0);
  s.accum = f.integer("accum", 1);
  s.seed = f.unsigned_integer("seed");
  s.config = nn::GptConfig::from_json(f.object("config"), f.where("config"), data::kVocab);
  s.cursor = data::Cursor::from_json(f.object("cursor"), f.where("cursor"));
  if (j.contains("bundle")) {
    s.bundle = policy::Bundle::from_json(f.object("bundle"), f.where("bundle"));
  }
  check_cursor(s, f);
  return s;
}

}  // namespace keel::train
