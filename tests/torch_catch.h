// Include this instead of <catch2/catch.hpp> in tests that use libtorch.
// Debian's libtorch pulls in glog, whose CHECK macro would replace Catch2's CHECK (turning a
// failed check into an abort). Torch's headers come first, glog's CHECK is dropped, and Catch2
// defines its own.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Logging.h>

#undef CHECK
#include <catch2/catch.hpp>
