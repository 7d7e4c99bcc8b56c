#pragma once
// What the sources of the errors test share: the values of the matrices they distribute. The threads::run
// tests (errors_threads_run_test.cpp) compile apart from the typed test (errors_test.cpp), since they
// instantiate what they call over a faulty_communicator, and the typed test over the backend's.
#include <cstdint>

namespace shardwise::testing {

inline double value(std::int64_t i, std::int64_t j) { return static_cast<double>(3 * i + j); }

}  // namespace shardwise::testing
