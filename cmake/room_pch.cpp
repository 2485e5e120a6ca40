// The translation unit that owns the rooms' shared precompiled header (keel_room_precompile in
// cmake/build_speed.cmake); it defines nothing.
