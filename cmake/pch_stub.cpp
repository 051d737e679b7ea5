// The one source of speclab_torch_pch (CMakeLists.txt, SPECLAB_PCH): CMake compiles a target's
// precompiled header with that target's flags, and a target needs a source for that. The header
// is the target's target_precompile_headers() entry; this file adds nothing to it.
