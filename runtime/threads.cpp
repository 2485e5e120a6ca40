#include "runtime/threads.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

namespace keel::runtime {

ThreadPlan plan_threads(int asked, int local_processes, const files::CpuLimit& limit, int online,
                        int omp_num_threads) {
  ThreadPlan plan;
  const int local = std::max(1, local_processes);
  plan.host_cores = std::max(1, limit.quota > 0 ? std::min(online, limit.quota) : online);
  plan.oversubscribed = local > plan.host_cores;
  if (asked > 0) {
    plan.threads = asked;
    plan.why = "launch.threads";
    return plan;
  }
  if (omp_num_threads > 0 && local == 1) {
    plan.threads = omp_num_threads;
    plan.why = "OMP_NUM_THREADS";
    return plan;
  }
  const int share = std::max(1, plan.host_cores / local);
  plan.threads = std::max(1, std::min(limit.allowed, share));
  plan.why = fmt::format(
      "{} core(s){} shared by {} process(es) on this host, {} in the affinity mask",
      plan.host_cores,
      limit.quota > 0 && limit.quota < online ? fmt::format(" (CPU quota, {})", limit.quota_source)
                                              : std::string(),
      local, limit.allowed);
  return plan;
}

ThreadPlan plan_threads_here(const policy::LaunchPolicy& policy, int local_processes) {
  files::CpuLimit limit = files::cpu_limit();
  limit.allowed = std::max(1, omp_get_num_procs());
  const char* omp_env = std::getenv("OMP_NUM_THREADS");
  return plan_threads(static_cast<int>(policy.integer("launch.threads")), local_processes, limit,
                      std::max(1, static_cast<int>(std::thread::hardware_concurrency())),
                      omp_env && *omp_env ? omp_get_max_threads() : 0);
}

}  // namespace keel::runtime
