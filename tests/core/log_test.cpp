// The log's file sink: lines said before a run's events.log exists reach it once it opens.

#include "strato/core/log.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace strato {
namespace {

std::string slurp(const std::filesystem::path& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

TEST(Log, HeldLinesReachTheFileSinkFirst) {
    const auto dir = std::filesystem::temp_directory_path() / ("strato-log-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto path = dir / "events.log";
    const log::Level console = log::level();
    log::set_level(log::Level::kError);  // nothing on stderr: only the file sees info and warnings

    log::hold_for_file_sink();
    EXPECT_TRUE(log::enabled(log::Level::kInfo));
    log::warn("class '{}' has no images", "cat");
    log::info("opened");
    log::debug("not kept");
    ASSERT_TRUE(log::add_file_sink(path.string()));
    log::info("after");
    log::remove_file_sinks();
    log::info("not written");
    std::string text = slurp(path);
    EXPECT_NE(text.find("warning class 'cat' has no images\n"), std::string::npos) << text;
    EXPECT_LT(text.find("has no images"), text.find("opened")) << text;
    EXPECT_LT(text.find("opened"), text.find("after")) << text;
    EXPECT_EQ(text.find("not kept"), std::string::npos) << text;
    EXPECT_EQ(text.find("not written"), std::string::npos) << text;

    // Removing the sinks ends holding too: a later file starts empty.
    log::hold_for_file_sink();
    log::info("from a failed start");
    log::remove_file_sinks();
    EXPECT_FALSE(log::enabled(log::Level::kInfo));
    log::info("between runs");
    ASSERT_TRUE(log::add_file_sink((dir / "second.log").string()));
    log::remove_file_sinks();
    EXPECT_EQ(slurp(dir / "second.log"), "");

    log::set_level(console);
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strato
