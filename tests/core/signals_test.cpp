// The stop handlers: a first SIGTERM asks to stop; a second from the same sender ends the process
// at once; a second from another sender within a second is the first one's echo (Slurm signals
// every process of a job step while the parent passes the stop on). Each case runs in a death
// test's child, which owns its signal dispositions.
#include "strato/core/signals.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace strato::signals {
namespace {

// A SIGTERM from a process other than this one (a child: its pid is the sender).
void sigterm_from_a_child() {
    const pid_t parent = ::getpid();
    const pid_t child = ::fork();
    if (child == 0) {
        ::kill(parent, SIGTERM);
        ::_exit(0);
    }
    int status = 0;
    ::waitpid(child, &status, 0);
}

// Found by review: under Slurm a trial got SIGTERM from slurmstepd and from the tune executor, and
// the second one ended it at once, without the checkpoint the first asked for.
TEST(SignalsDeathTest, AStopEchoedByAnotherSenderIsOneStop) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            install_stop_handlers();
            ::kill(::getpid(), SIGTERM);
            sigterm_from_a_child();
            ::_exit(stop_requested() && stop_signal() == SIGTERM && signal_count() == 1 ? 7 : 1);
        },
        ::testing::ExitedWithCode(7), "");
}

// Every command's "interrupted by signal N ..." (compress, export) comes from one place.
TEST(SignalsDeathTest, StoppedNamesTheSignal) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            install_stop_handlers();
            const bool before = stopped("after pruning; no package written").is_ok();
            ::kill(::getpid(), SIGINT);
            const Status after = stopped("after pruning; no package written");
            ::_exit(before && after.code() == StatusCode::kCancelled &&
                            after.message() == "interrupted by signal 2 after pruning; no package written"
                        ? 7
                        : 1);
        },
        ::testing::ExitedWithCode(7), "");
}

TEST(SignalsDeathTest, ASecondStopFromTheSameSenderEndsTheProcess) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(
        {
            install_stop_handlers();
            ::kill(::getpid(), SIGTERM);
            ::kill(::getpid(), SIGINT);  // (the user insists)
            ::_exit(1);
        },
        ::testing::ExitedWithCode(128 + SIGINT), "");
    // From another sender, but more than a second later: insisting too.
    EXPECT_EXIT(
        {
            install_stop_handlers();
            ::kill(::getpid(), SIGTERM);
            ::usleep(1'100'000);
            sigterm_from_a_child();
            ::_exit(1);
        },
        ::testing::ExitedWithCode(128 + SIGTERM), "");
}

}  // namespace
}  // namespace strato::signals
