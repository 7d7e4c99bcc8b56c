#pragma once
// The shared-memory backend: P ranks as threads of one process (`threads::run(P, body)`). The header
// users include; the backend's parts, one job each, are under comm/threads/:
//
//   launch.hpp              threads::run: starts the ranks, reports the error of the rank that failed
//   communicator.hpp        threads::communicator: numbers its collectives, posts its sends/receives
//   collective.hpp          one rank's part in a collective: post, agree, work phase by phase, leave
//   rendezvous.hpp          where a group's ranks meet for a collective, and the barrier between phases
//   direct_collectives.hpp  the data movement: each rank reads and writes its peers' buffers directly
//   mailbox.hpp             point to point: sends and receives matched in the receiver's mailbox
//   group.hpp               the ranks of a communicator, and how a split makes a new one
//   request.hpp             started operations: wait(), test()
//   in_flight.hpp           a rank's started collectives, finished in the order they were started
//   failure.hpp             how one rank's error stops the others (peer_error) and reaches run()
//   shared_memory.hpp       every rank's block of memory, reachable by all (comm/shared_memory.hpp)
//
// Before any data moves, every rank checks that all called the same collective with the same element
// type, count, root and reduction (comm/agreement.hpp).
#include "shardwise/comm/threads/communicator.hpp"
#include "shardwise/comm/threads/launch.hpp"
#include "shardwise/comm/threads/shared_memory.hpp"
