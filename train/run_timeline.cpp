#include "train/run_timeline.h"

#include <fmt/format.h>

#include "diag/timeline.h"
#include "files/publish.h"
#include "train/data_parallel.h"

namespace keel::train {

void start_run_timeline(const Runtime& rt) {
  diag::Timeline& r = diag::Timeline::process();
  r.clear();
  r.enable();
  r.set_process(rt.place().rank, fmt::format("rank {} on {}", rt.place().rank, rt.place().host));
  r.name_thread("main");
  r.complete("init", "init", 0, r.now_us(),
             {{"what",
               "process start to the trainer: runtime, "
               "policy, probe, arguments"}});
}

std::string write_run_timeline(const std::string& run_dir, bool leader, bool gather) {
  diag::Timeline& r = diag::Timeline::process();
  const std::string path = run_dir + "/trace.json";
  std::vector<nlohmann::json> processes;
  int64_t dropped = r.dropped();
  if (gather) {
    // Names and arguments are any bytes: invalid UTF-8 is replaced, never thrown on, so every
    // rank reaches the gather.
    const nlohmann::json mine = {{"events", r.events()}, {"dropped", r.dropped()}};
    const std::vector<std::string> all =
        gather_text_over_world(mine.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    if (!leader) return path;
    dropped = 0;
    for (const std::string& text : all) {
      nlohmann::json p = nlohmann::json::parse(text);
      processes.push_back(std::move(p["events"]));
      dropped += p["dropped"].get<int64_t>();
    }
  } else {
    processes.push_back(r.events());
  }
  if (leader) files::publish_file(path, diag::trace_document(processes, dropped));
  return path;
}

}  // namespace keel::train
