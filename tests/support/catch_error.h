// catch_error(f): the speclab::Error that f() throws; fails the test when it throws none.
// Include after Catch (catch2/catch.hpp or tests/torch_catch.h).
#pragma once

#include "framework/core/error.h"

namespace speclab::test {

template <typename F>
Error catch_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected speclab::Error");
  return Error(ErrorKind::kInternal, "unreachable");
}

}  // namespace speclab::test
