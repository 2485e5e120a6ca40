#pragma once
// Seconds since this process started (from /proc), so time-to-first-step includes everything
// before main as well.
namespace keel::files {

double seconds_since_process_start();

}  // namespace keel::files
