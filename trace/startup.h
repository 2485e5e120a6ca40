#pragma once
/// @file
/// The process's startup phase, as far as tensors are concerned. keel::Runtime moves it
/// (uninitialised -> initialised at init, back at shutdown); the first tensor holding a value
/// moves it to running. trace/ only enforces that no tensor exists before the runtime does.
#include <optional>

#include "ir/source_loc.h"

namespace keel {

/// No Runtime; a Runtime and no tensor yet; tensors exist.
enum class StartupPhase { uninitialised, initialised, running };
const char* startup_phase_name(StartupPhase p);  ///< "uninitialised", "initialised" or "running"

StartupPhase startup_phase();  ///< the process's current phase
/// Runtime only: init sets initialised, shutdown sets uninitialised (and forgets the first tensor).
void set_startup_phase(StartupPhase p);

/// Every value tensor calls this. Before init: keel::Error "[runtime] tensor created at <loc>
/// before keel::Runtime::init; ..." naming the rule and the fix. The first call after init moves
/// the phase to running and remembers `loc`.
void note_tensor_created(const SourceLoc& loc);
/// Where the first tensor of this runtime was created, once running.
std::optional<SourceLoc> first_tensor_location();

}  // namespace keel
