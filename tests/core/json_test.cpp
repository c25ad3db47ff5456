// UTF-8 checks and JSON text that survives bytes which are not UTF-8.

#include "strato/core/json.h"
#include "strato/core/json_depth.h"

#include <gtest/gtest.h>

namespace strato {
namespace {

TEST(Utf8, WellFormedCharactersOnly) {
    EXPECT_TRUE(is_utf8(""));
    EXPECT_TRUE(is_utf8("plain ascii"));
    EXPECT_TRUE(is_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));  // é € 😀
    EXPECT_EQ(utf8_length_at("\xe2\x82\xac", 0), 3u);
    EXPECT_EQ(utf8_length_at("\xf0\x9f\x98\x80", 0), 4u);
    for (const char* bad : {"\xff", "caf\xe9", "\x80", "\xc0\xaf" /* overlong '/' */, "\xe0\x80\xaf",
                            "\xed\xa0\x80" /* surrogate */, "\xf4\x90\x80\x80" /* past U+10FFFF */, "\xe2\x82",
                            "\xf0\x9f\x98"}) {
        EXPECT_FALSE(is_utf8(bad)) << testing::PrintToString(std::string(bad));
    }
}

TEST(JsonText, InvalidBytesBecomeReplacementCharacters) {
    nlohmann::json j = {{"name", "caf\xe9"}, {"n", 1}};
    EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);
    EXPECT_EQ(json_text(j), "{\"n\":1,\"name\":\"caf\xef\xbf\xbd\"}");
    EXPECT_EQ(json_text(j, 1), "{\n \"n\": 1,\n \"name\": \"caf\xef\xbf\xbd\"\n}");
}

TEST(JsonDepth, DeepNestingIsRefusedBeforeParsing) {
    // Found by review: 100,000 '[' in a run file crashed `strato report` (recursive printing).
    const std::string deep = "{\"kind\":" + std::string(100000, '[') + std::string(100000, ']') + "}";
    EXPECT_EQ(json_too_deep(deep), 8u + kMaxJsonDepth - 1);
    EXPECT_TRUE(parse_json_bounded(deep).is_discarded());
    const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
    EXPECT_EQ(json_too_deep(ok), std::string_view::npos);
    EXPECT_FALSE(parse_json_bounded(ok).is_discarded());
    EXPECT_EQ(json_too_deep("{\"a\": \"[[[[\\\"[[[\"}", 2), std::string_view::npos);  // brackets in strings
    EXPECT_TRUE(parse_json_bounded("{oops").is_discarded());
}

}  // namespace
}  // namespace strato
