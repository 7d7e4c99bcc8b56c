#pragma once
// The message of the error a call throws, for tests that compare the whole text a user reads.
#include <gtest/gtest.h>

#include <string>

namespace shardwise::testing {

// What f throws as E; a test failure, and "", when it throws nothing.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "nothing was thrown";
  return {};
}

}  // namespace shardwise::testing
