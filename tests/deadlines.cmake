# Per-test deadlines: a few times each test's normal time on 2 cores under
# `ctest -j2`, so that a hang fails in seconds, not at a 600 s limit. The
# harnesses (tests/harness.c runRanks, python/tests/harness.py run) cut their
# own deadlines to CHORUS_TEST_DEADLINE, so a stuck run ends with the ranks
# that did not finish named, before ctest's TIMEOUT (10 s later) kills it.
# Sanitizer builds run several times slower: CHORUS_DEADLINE_SCALE.
if(CHORUS_SANITIZE STREQUAL "thread")
  set(CHORUS_DEADLINE_SCALE 10 CACHE STRING "multiplies every test deadline")
elseif(CHORUS_SANITIZE)
  set(CHORUS_DEADLINE_SCALE 4 CACHE STRING "multiplies every test deadline")
else()
  set(CHORUS_DEADLINE_SCALE 1 CACHE STRING "multiplies every test deadline")
endif()

# tests/mutate.sh builds with a cap on every deadline (a mutant that makes a
# test hang should cost seconds).
set(CHORUS_DEADLINE_CAP 0 CACHE STRING "caps every test deadline (seconds; 0: no cap)")

# Seconds, for the tests that normally take more than a few (normal time in
# the comment); every other test gets 20.
set(CHORUS_DEADLINES
  torch_ddp=300          # 80 s
  netns_suite=200        # 50 s
  torch_ops_4=180        # 45 s
  torch_ops_3=150        # 37 s
  torch_plugin=120       # 32 s
  torch_faults=120       # 26 s
  torch_ops_2=90         # 22 s
  fuzz=80                # 19 s
  torch_ops_1=75         # 18 s
  coll_fork_8=75         # 18 s
  coll_fork_8_socket=75  # 19 s
  coll_bounds_threads_16=80  # 20 s
  coll_bounds_8=60       # 14 s
  netns_shaped=60        # 13 s
  netns_drain=100        # 30 s (three jobs over a 10 Mbit/s link)
  netns_ifname=60        # 15 s
  perf_tools=75          # 22 s under ctest -j2
  coll_bounds_7=45       # 10 s
  coll_bounds_7_socket=45  # 10 s
  torch_async=45         # 11 s
  coll_fork_5_socket=45  # 10 s
  coll_fork_5=30         # 8 s
  coll_bounds_6=30       # 7 s
  torch_groups=30        # 7 s
  netns_linkdown=30      # 6 s
  fault_stop=30 fault_stop_socket=30 fault_skip=30 fault_skip_socket=30 fault_commtimeout=30  # 6 s
  fault_finalized=30 fault_finalized_socket=30  # 5 s
  # Forced algorithms and the heavier suites: normal times of 5-11 s, up to
  # 20 s under ctest -j2 on a busy machine.
  coll_bounds_threads_16=60  # 11 s
  coll_bounds_7_algo_recdoubling=45 coll_bounds_6_algo_tree=45  # 6-11 s
  coll_threads_8_algo_recdoubling_rs=40 coll_bounds_5_algo_recdoubling_rs=40 coll_fork_6_algo_recdoubling_rs=40
  coll_fork_7_algo_rabenseifner=40 coll_threads_8_algo_rabenseifner=40 coll_bounds_3_algo_rabenseifner=40  # 4-10 s
  # Under valgrind (memcheck_*): 3-14 s alone (nonblocking_2 6-7 s; it took 28-160 s on this VM while its polls
  # never slept: valgrind runs one thread at a time, and the init threads they waited for barely ran).
  memcheck_coll_3=60 memcheck_coll_3_socket=60 memcheck_coll_threads_2=45 memcheck_flight=45 memcheck_nonblocking_2=60
  coll_fork_3_socket=40 coll_threads_3_socket=40 coll_bounds_3=40 netns_shaped=45  # 5-12 s
)

# Sets TIMEOUT and CHORUS_TEST_DEADLINE on every test of the calling directory.
function(chorus_set_deadlines)
  get_property(tests DIRECTORY PROPERTY TESTS)
  foreach(t ${tests})
    set(sec 20)
    foreach(entry ${CHORUS_DEADLINES})
      if(entry MATCHES "^${t}=([0-9]+)$")
        set(sec ${CMAKE_MATCH_1})
      endif()
    endforeach()
    math(EXPR sec "${sec} * ${CHORUS_DEADLINE_SCALE}")
    if(CHORUS_DEADLINE_CAP GREATER 0 AND sec GREATER CHORUS_DEADLINE_CAP)
      set(sec ${CHORUS_DEADLINE_CAP})
    endif()
    math(EXPR limit "${sec} + 10")
    set_property(TEST ${t} PROPERTY TIMEOUT ${limit})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT_MODIFICATION "CHORUS_TEST_DEADLINE=set:${sec}")
  endforeach()
endfunction()
