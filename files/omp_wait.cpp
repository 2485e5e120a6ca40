#include "files/omp_wait.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace keel::files {
namespace {

constexpr const char kAddedMarker[] = "keel_added_gomp_spincount";

bool names(const char* entry, const char* name) {
  const size_t n = std::strlen(name);
  return std::strncmp(entry, name, n) == 0 && entry[n] == '=';
}

char g_spin_entry[64] = "GOMP_SPINCOUNT=";
char g_marker_entry[] = "keel_added_gomp_spincount=1";
char g_self[4096];
char* g_environment[8192];

// Runs before any library's initializer (libgomp's included): libc is not set up yet, so this
// uses no allocation and no setenv, only the environment it is handed, readlink and execve.
void start_with_bounded_spin(int, char** argv, char** envp) {
  if (!argv || !envp) return;
  size_t n = 0;
  for (; envp[n]; ++n) {
    if (names(envp[n], "OMP_WAIT_POLICY") || names(envp[n], "GOMP_SPINCOUNT") ||
        names(envp[n], kAddedMarker))
      return;
  }
  if (n + 3 > sizeof g_environment / sizeof g_environment[0]) return;
  // The program's own path, so the process keeps its name ("keel", not "exe"); not when it
  // was started through the dynamic loader, whose argv is not the program's.
  const ssize_t len = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
  if (len <= 0 || static_cast<size_t>(len) >= sizeof g_self - 1) return;
  g_self[len] = '\0';
  if (std::strstr(g_self, "/ld-linux") || std::strstr(g_self, " (deleted)")) return;
  std::strncat(g_spin_entry, kSpinCount, sizeof g_spin_entry - std::strlen(g_spin_entry) - 1);
  for (size_t i = 0; i < n; ++i) g_environment[i] = envp[i];
  g_environment[n] = g_spin_entry;
  g_environment[n + 1] = g_marker_entry;
  g_environment[n + 2] = nullptr;
  execve(g_self, argv, g_environment);  // on failure, go on with libgomp's default
}

[[gnu::section(".preinit_array"), gnu::used]] void (*preinit)(int, char**,
                                                              char**) = start_with_bounded_spin;

// LLVM's libomp (in the process when keel or the program is built by clang) spins 200 ms by
// default and ignores GOMP_SPINCOUNT; it reads its settings at its first parallel region, after
// main, and kmp_set_defaults gives them without touching the environment.
using SetDefaults = void (*)(const char*);
SetDefaults libomp_set_defaults() {
  return reinterpret_cast<SetDefaults>(dlsym(RTLD_DEFAULT, "kmp_set_defaults"));
}

// Dynamic initialisation runs after every shared library's initializer, so libgomp has read
// its settings by now: what keel added is recorded and taken out of the environment, so child
// processes (the compiler, an eager PyTorch baseline) start with the environment the user gave.
struct StartedWith {
  std::string setting;
  StartedWith() {
    const SetDefaults set_defaults = libomp_set_defaults();
    const char* user_blocktime = std::getenv("KMP_BLOCKTIME");
    const bool libomp_bounded = set_defaults && !user_blocktime && !std::getenv("OMP_WAIT_POLICY");
    if (libomp_bounded) set_defaults(kLibompBlocktime);
    if (std::getenv(kAddedMarker)) {
      setting = std::string("GOMP_SPINCOUNT=") + kSpinCount + " (set by keel)";
      unsetenv("GOMP_SPINCOUNT");
      unsetenv(kAddedMarker);
    } else {
      for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"}) {
        if (const char* v = std::getenv(name)) {
          setting += (setting.empty() ? "" : " ") + std::string(name) + "=" + v;
        }
      }
      if (setting.empty()) setting = "libgomp's default";
    }
    if (libomp_bounded) setting += std::string(", ") + kLibompBlocktime + " (set by keel)";
    if (set_defaults && user_blocktime) setting += std::string(", KMP_BLOCKTIME=") + user_blocktime;
  }
};
const StartedWith g_started_with;

}  // namespace

std::string omp_wait_setting() {
  return g_started_with.setting;
}

}  // namespace keel::files
