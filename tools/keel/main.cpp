// keel command line: wiring only; the work lives in the library rooms.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/deadline.h"
#include "ir/error.h"
#include "policy/bundle.h"
#include "tools/keel/commands.h"
#include "tools/keel/launch.h"

namespace {

bool peers_fail_too = false;

// CLI11 names an option ("--steps: Value 0 not in range ...") even when its environment variable
// gave the value; then the message names the variable, which is what the user has to change.
std::string with_variable(const CLI::App& app, const std::string& message) {
  const size_t colon = message.find(':');
  if (!message.starts_with("--") || colon == std::string::npos) return message;
  const std::string name = message.substr(0, colon);
  std::vector<const CLI::App*> apps = {&app};  // and the subcommands parsed, at any depth
  for (size_t i = 0; i < apps.size(); ++i) {
    for (const CLI::App* sub : apps[i]->get_subcommands()) apps.push_back(sub);
  }
  for (const CLI::App* a : apps) {
    if (const CLI::Option* opt = a->get_option_no_throw(name)) {
      return keel::cli::option_text(name, opt->get_envname()) + message.substr(colon);
    }
  }
  return message;
}

int run(int argc, char** argv) {
  keel::cli::remember_arguments(argc, argv);
  CLI::App app{"keel: trace a training step into one program, compile it once, train on it"};
  app.require_subcommand(1);
  app.set_version_flag("--version", [] { return keel::policy::version_text(); });
  keel::cli::add_launch_options(app);
  keel::cli::add_train(app);
  keel::cli::add_demo(app);
  keel::cli::add_ir(app);
  keel::cli::add_cache(app);
  keel::cli::add_explain(app);
  keel::cli::add_report(app);
  keel::cli::add_policy(app);
  keel::cli::add_probe(app);
  keel::cli::add_bundle(app);
  keel::cli::add_features(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {
    if (*e.what()) std::fprintf(stderr, "[keel] %s\n", e.what());
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "[keel] %s; run 'keel --help' for usage\n",
                 with_variable(app, e.what()).c_str());
    return 2;
  } catch (const keel::dist::LaunchFailure& e) {
    std::fprintf(stderr, "%s\n", e.what());
    peers_fail_too = true;
    return 1;
  } catch (const keel::InputError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const keel::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[keel] unexpected error: %s\n", e.what());
    return 1;
  }
  return keel::cli::clean_exit_code();
}

}  // namespace

int main(int argc, char** argv) {
  const int code = run(argc, argv);
  if (code != 0 && code == keel::cli::clean_exit_code()) return code;  // every rank ends alike
  // Under mpirun a failing rank ends the launch; the others may be waiting for it.
  // After a missed deadline or a disagreement the other ranks are about to fail the same way:
  // a moment lets each print its own line before the launch ends.
  const bool together = peers_fail_too || keel::dist::failure_shared();
  if (code != 0) {
    keel::cli::release_stop_signals();  // mpirun's teardown ends a failed rank at once
    keel::dist::end_launch_after_failure(code, together ? 3.0 : 0.0);
  }
  return code;
}
