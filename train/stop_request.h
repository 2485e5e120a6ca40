#pragma once
// A request to end a training run early, e.g. from a SIGINT or SIGTERM handler (preemption): the
// trainer finishes the step in flight, checkpoints it and returns (TrainResult::stopped_by), so
// `--resume` loses nothing. Under data parallel the ranks agree on the step (any rank's request
// stops all of them after the same step).
namespace keel::train {

// Records `signal` (non-zero) unless a request is already recorded. Async-signal-safe.
void request_stop(int signal);
// The first request's signal, or 0.
int stop_requested();
// Forgets the request (and the steps' start), so a later run in the same process trains to its
// end.
void clear_stop_request();
// The trainer marks where its steps start: before, a stop request may cut a compile short
// (files::interrupt_children); after, the step in flight ends first. Async-signal-safe.
void mark_steps_started();
bool steps_started();

}  // namespace keel::train
