// The one source of the test precompiled-header targets (tests/CMakeLists.txt,
// SPECLAB_TEST_PCH): CMake compiles a target's precompiled header with that target's flags,
// and a target needs a source for that. Each is an executable, so that its flags are a test
// executable's; it is never run.
int main() { return 0; }
