// The catalog: the shipped files parse, bad files give errors naming the place, overrides apply.

#include <gtest/gtest.h>

#include <cctype>

#include "strato/cloud/catalog.h"
#include "strato/cloud/throughput.h"

namespace strato::cloud {
namespace {

const char* kHeader =
    "provider,region,instance_type,accelerator,accelerator_count,vcpus,memory_gib,network_gbps,"
    "ondemand_usd_per_hour,spot_usd_per_hour,source\n";

Result<Catalog> from_rows(const std::string& rows) {
    return Catalog::parse(std::string(kHeader) + rows, "test.csv", detail::kGpusCsv, "gpus.csv", detail::kSpotCsv,
                          "spot.csv");
}

TEST(Catalog, BuiltinLoadsWithProvenanceAndGpus) {
    auto cat = Catalog::builtin();
    ASSERT_TRUE(cat.is_ok()) << cat.status().message();
    const Catalog& c = cat.value();
    EXPECT_GE(c.instances().size(), 80u);
    auto p4d = c.find("p4d.24xlarge", "us-east-1");
    ASSERT_TRUE(p4d.is_ok());
    EXPECT_EQ(p4d.value()->gpus, 8);
    EXPECT_NEAR(p4d.value()->ondemand_usd_h, 21.957642, 1e-9);
    ASSERT_NE(p4d.value()->gpu, nullptr);
    EXPECT_EQ(p4d.value()->gpu->memory_gb, 40);
    EXPECT_NE(p4d.value()->source.find("SkyPilot"), std::string::npos);
    EXPECT_FALSE(c.find("p5.4xlarge").value()->has_spot());
    // Rows without a price (the Alibaba row) and accelerators strato does not model (TPU) are flagged.
    bool no_price = false, tpu = false;
    for (const auto& w : c.warnings()) {
        no_price |= w.find("ecs.gn7i-c8g1.2xlarge has no price") != std::string::npos;
        tpu |= w.find("'tpu-v6e' is not in the GPU table") != std::string::npos;
    }
    EXPECT_TRUE(no_price);
    EXPECT_TRUE(tpu);
}

TEST(Catalog, UnknownTypeSuggests) {
    const Catalog c = Catalog::builtin().value();
    auto r = c.find("p4d.24xlarg");
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find("did you mean 'p4d.24xlarge'"), std::string::npos) << r.status().message();
    auto region = c.find("p4d.24xlarge", "mars-1");
    EXPECT_NE(region.status().message().find("not offered in region 'mars-1'"), std::string::npos);
    // Found by review: `strato plan --region` matches in any case, the catalog's find did not.
    auto cased = c.find("p4d.24xlarge", "US-EAST-2");
    ASSERT_TRUE(cased.is_ok()) << cased.status().message();
    EXPECT_EQ(cased.value()->region, "us-east-2");
}

TEST(Catalog, BadFilesNameTheLine) {
    auto empty = from_rows("");
    ASSERT_FALSE(empty.is_ok());
    EXPECT_NE(empty.status().message().find("no instances"), std::string::npos);
    auto bad = from_rows("aws,us-east-1,x,T4,1,4,16,25,cheap,0.2,src\n");
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.status().message().find("test.csv:2 ondemand_usd_per_hour: expected a number, got 'cheap'"),
              std::string::npos)
        << bad.status().message();
    auto huge = from_rows("aws,us-east-1,x,T4,1e40,4,16,25,1,0.2,src\n");
    EXPECT_NE(huge.status().message().find("accelerator_count and vcpus must be whole numbers from 0 to 1e6, got 1e+40 and 4"),
              std::string::npos)
        << huge.status().message();
    EXPECT_FALSE(from_rows("aws,us-east-1,x,T4,1,2.5,16,25,1,0.2,src\n").is_ok());
    auto missing = Catalog::parse("provider,region\naws,x\n", "m.csv", detail::kGpusCsv, "g", detail::kSpotCsv, "s");
    EXPECT_NE(missing.status().message().find("missing column 'instance_type'"), std::string::npos);
}

// Found by review: a quoted field after a blank (`aws, "us-east-1"`) kept its quotes, so the
// region was "\"us-east-1\"" and --region us-east-1 did not find it; a row of commas only (an
// empty spreadsheet row) failed the whole file.
TEST(Catalog, QuotedFieldsAfterBlanksAndRowsOfCommasOnly) {
    auto c = from_rows("aws, \"us-east-1\" , \"g4dn.xlarge\",T4,1,4,16,25,0.526,0.2,\"a, b\"\n,,,,,,,,,,\n"
                       " , , ,,,,,,,,\n");
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    ASSERT_EQ(c->instances().size(), 1u);
    EXPECT_EQ(c->instances()[0].region, "us-east-1");
    EXPECT_EQ(c->instances()[0].type, "g4dn.xlarge");
    EXPECT_EQ(c->instances()[0].source, "a, b");
    EXPECT_TRUE(c->find("g4dn.xlarge", "us-east-1").is_ok());
}

TEST(Catalog, DuplicatesNegativesAndRowsWithoutGpusAreNamed) {
    auto dup = from_rows("aws,us-east-1,x,T4,1,4,16,25,1,0.2,src\naws,us-east-1,x,T4,1,4,16,25,1,0.2,src\n");
    EXPECT_NE(dup.status().message().find("test.csv:3 instance_type: aws/us-east-1/x is listed twice (also on line 2)"),
              std::string::npos)
        << dup.status().message();
    auto neg = from_rows("aws,us-east-1,x,T4,1,4,16,-25,1,0.2,src\n");
    EXPECT_NE(neg.status().message().find("test.csv:2 network_gbps: must not be negative, got -25"), std::string::npos)
        << neg.status().message();
    auto none = from_rows("aws,us-east-1,x,T4,1,4,16,25,1,0.2,src\naws,us-east-1,cpu,,0,4,16,25,1,0.2,src\n");
    ASSERT_TRUE(none.is_ok()) << none.status().message();
    bool warned = false;
    for (const auto& w : none->warnings()) warned |= w.find("aws/us-east-1/cpu has no accelerators") != std::string::npos;
    EXPECT_TRUE(warned);
    // Blanks around text fields are not part of them (found by review: " us-east-1" was a region of
    // its own, " A100" an unknown GPU, and "x " got past the duplicate check).
    auto spaced = from_rows("aws, us-east-1, x, T4, 1, 4, 16, 25, 1, 0.2, src\naws,us-east-1,x ,T4,1,4,16,25,1,0.2,src\n");
    EXPECT_NE(spaced.status().message().find("aws/us-east-1/x is listed twice"), std::string::npos)
        << spaced.status().message();
    auto trimmed = from_rows("aws, us-east-1, x, T4, 1, 4, 16, 25, 1, 0.2, src\n");
    ASSERT_TRUE(trimmed.is_ok()) << trimmed.status().message();
    EXPECT_TRUE(trimmed->find("x", "us-east-1").is_ok());
    ASSERT_NE(trimmed->find("x", "us-east-1").value()->gpu, nullptr);
    std::string gpus = detail::kGpusCsv;
    gpus += gpus.substr(gpus.find('\n') + 1, gpus.find('\n', gpus.find('\n') + 1) - gpus.find('\n'));  // row 1 again
    auto twice = Catalog::parse(std::string(kHeader) + "aws,us-east-1,x,T4,1,4,16,25,1,0.2,src\n", "test.csv", gpus,
                                "gpus.csv", detail::kSpotCsv, "spot.csv");
    EXPECT_NE(twice.status().message().find("is listed twice"), std::string::npos) << twice.status().message();
    // Found by review: providers, regions and accelerators match in any case, but the duplicate
    // checks compared exactly: "AWS/US-EAST-1/x" after "aws/us-east-1/x" was planned as a second
    // machine, and a GPU "t4" after "T4" was a second entry that `--gpu t4` never reached.
    auto cased = from_rows("aws,us-east-1,x,T4,1,4,16,25,1,0.2,src\nAWS,US-EAST-1,x,T4,1,4,16,25,1,0.2,src\n");
    EXPECT_NE(cased.status().message().find(
                  "test.csv:3 instance_type: AWS/US-EAST-1/x is listed twice (also on line 2, as aws/us-east-1/x"),
              std::string::npos)
        << cased.status().message();
    EXPECT_TRUE(from_rows("aws,us-east-1,x,T4,1,4,16,25,1,0.2,src\naws,us-east-1,X,T4,1,4,16,25,1,0.2,src\n").is_ok());
    std::string lower_gpus = detail::kGpusCsv;
    const size_t row1 = lower_gpus.find('\n') + 1;
    std::string again = lower_gpus.substr(row1, lower_gpus.find('\n', row1) + 1 - row1);
    for (size_t i = 0; i < again.size() && again[i] != ','; ++i) again[i] = static_cast<char>(std::tolower(again[i]));
    auto gpu_cased = Catalog::parse(std::string(kHeader) + "aws,us-east-1,x,T4,1,4,16,25,1,0.2,src\n", "test.csv",
                                    lower_gpus + again, "gpus.csv", detail::kSpotCsv, "spot.csv");
    EXPECT_NE(gpu_cased.status().message().find("is listed twice (also as '"), std::string::npos)
        << gpu_cased.status().message();
}

// Found by review: a SkyPilot vms.csv given to --catalog (the file an ML engineer has) failed with
// a bare "missing column 'provider'"; an accelerator spelled "t4" was not the GPU table's T4; and
// the warning for an unknown accelerator named no file or line.
TEST(Catalog, SkyPilotSnapshotsAcceleratorCaseAndWarningsWithTheLine) {
    auto sky = Catalog::parse(
        "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone,"
        "Arch\r\ng4dn.xlarge,T4,1.0,4.0,16.0,,0.5,0.19,us-east-1,use1-az1,x86_64\r\n",
        "vms.csv", detail::kGpusCsv, "gpus.csv", detail::kSpotCsv, "spot.csv");
    ASSERT_FALSE(sky.is_ok());
    EXPECT_NE(sky.status().message().find("vms.csv:1: missing column 'provider'"), std::string::npos)
        << sky.status().message();
    EXPECT_NE(
        sky.status().message().find("this is a SkyPilot vms.csv: convert it with scripts/cloud/refresh_catalog.py"),
        std::string::npos)
        << sky.status().message();
    auto lower = from_rows("aws,us-east-1,x,t4,1,4,16,25,1,0.2,src\n");
    ASSERT_TRUE(lower.is_ok()) << lower.status().message();
    ASSERT_NE(lower->instances()[0].gpu, nullptr);
    EXPECT_EQ(lower->instances()[0].gpu->name, "T4");
    EXPECT_TRUE(lower->warnings().empty());
    // A provider in capitals gets its provider's spot rates, not the unknown-provider estimate.
    auto upper = from_rows("AWS,us-east-1,p4d.24xlarge,A100,8,96,1152,400,21.96,2.47,src\n");
    ASSERT_TRUE(upper.is_ok()) << upper.status().message();
    EXPECT_DOUBLE_EQ(upper->instances()[0].spot_interruptions_per_month, 0.025);
    auto tpu =
        from_rows("aws,us-east-1,x,T4,1,4,16,25,1,0.2,src\ngcp,us-central1,tpu-v6e-1,tpu-v6e,1,,,,2.7,0.5,src\n");
    ASSERT_TRUE(tpu.is_ok()) << tpu.status().message();
    ASSERT_EQ(tpu->warnings().size(), 1u);
    EXPECT_EQ(
        tpu->warnings()[0],
        "test.csv:3: gcp/us-central1/tpu-v6e-1: accelerator 'tpu-v6e' is not in the GPU table; left out of plans");
    // Warnings come in line order (an unknown accelerator's came after every other kind).
    auto mixed = from_rows("gcp,us-central1,tpu-v6e-1,tpu-v6e,1,,,,2.7,0.5,src\naws,us-east-1,x,T4,1,4,16,25,,,src\n");
    ASSERT_TRUE(mixed.is_ok()) << mixed.status().message();
    ASSERT_EQ(mixed->warnings().size(), 2u);
    EXPECT_EQ(mixed->warnings()[0].substr(0, 11), "test.csv:2:") << mixed->warnings()[0];
    EXPECT_EQ(mixed->warnings()[1].substr(0, 11), "test.csv:3:") << mixed->warnings()[1];
}

TEST(Catalog, OverridesDiscountsPricesCurrency) {
    Catalog c = Catalog::builtin().value();
    Status s = c.apply_overrides(R"(
currency = "CNY"
usd_to_cny = 7.0
discount = 0.1
[discounts]
aws = 0.3
"p4d.24xlarge" = 0.5
[prices."gcp/us-central1/a2-highgpu-1g"]
ondemand = 3.0
)", "o.toml");
    ASSERT_TRUE(s.is_ok()) << s.message();
    EXPECT_NEAR(c.find("p4d.24xlarge", "us-east-1").value()->ondemand_usd_h, 21.957642 * 0.5, 1e-9);
    EXPECT_NEAR(c.find("g5.xlarge", "us-east-1").value()->ondemand_usd_h, 1.006 * 0.7, 1e-9);
    EXPECT_NEAR(c.find("Standard_NC6s_v3").value()->ondemand_usd_h, 3.06 * 0.9, 1e-9);
    EXPECT_EQ(c.currency().code, "CNY");
    EXPECT_DOUBLE_EQ(c.currency().convert(2), 14);
    // Found by review: [prices] were read as USD under currency = "CNY", so a negotiated 3.0 CNY
    // an hour was priced at 21 CNY. They are in the declared currency.
    EXPECT_NEAR(c.find("a2-highgpu-1g").value()->ondemand_usd_h, 3.0 / 7.0, 1e-9);
    EXPECT_NEAR(c.currency().convert(c.find("a2-highgpu-1g").value()->ondemand_usd_h), 3.0, 1e-9);

    Catalog d = Catalog::builtin().value();
    EXPECT_NE(d.apply_overrides("[discounts]\n\"p4d.24xlarg\" = 0.2\n", "o.toml").message().find("did you mean"),
              std::string::npos);
    EXPECT_FALSE(d.apply_overrides("discount = 1.5\n", "o.toml").is_ok());
    EXPECT_FALSE(d.apply_overrides("currency = \"CNY\"\n", "o.toml").is_ok());
    EXPECT_FALSE(d.apply_overrides("colour = 1\n", "o.toml").is_ok());
    EXPECT_FALSE(d.apply_overrides("discount = \n", "o.toml").is_ok());
    // NaN passes a "< 0 || >= 1" check; infinity is no exchange rate; 0 is "not offered".
    EXPECT_NE(d.apply_overrides("discount = nan\n", "o.toml").message().find("discount must be a fraction"),
              std::string::npos);
    EXPECT_NE(d.apply_overrides("currency = \"CNY\"\nusd_to_cny = inf\n", "o.toml").message().find("usd_to_cny"),
              std::string::npos);
    EXPECT_EQ(d.currency().code, "USD");  // a refused file changes nothing, not even the currency before the error
    EXPECT_NE(d.apply_overrides("[prices.\"p4d.24xlarge\"]\nondemand = 0\n", "o.toml").message().find("in (0, 1e7]"),
              std::string::npos);
    // Found by review: a provider under [prices] was accepted and changed nothing.
    EXPECT_NE(d.apply_overrides("[prices.aws]\nondemand = 0.01\n", "o.toml").message().find("not per provider"),
              std::string::npos);
}

// Found by review: a region's [prices] entry lost to its type's when the type sorted later; a
// top-level `discounts = 0.5` was ignored; catalog prices of 1e308 made every cost inf (tied
// and ranked "cheapest"); fp32_tflops of 1e-300 gave 300-digit day counts.
TEST(Catalog, RegionPriceWinsNonTablesAndValuesOutOfRangeAreRefused) {
    for (const char* text : {"[prices.\"aws/us-east-1/g4dn.xlarge\"]\nondemand = 0.01\n[prices.\"g4dn.xlarge\"]\nondemand = 5.0\n",
                             "[prices.\"g4dn.xlarge\"]\nondemand = 5.0\n[prices.\"aws/us-east-1/g4dn.xlarge\"]\nondemand = 0.01\n"}) {
        Catalog c = Catalog::builtin().value();
        ASSERT_TRUE(c.apply_overrides(text, "o.toml").is_ok()) << text;
        for (const auto& in : c.instances()) {
            if (in.type == "g4dn.xlarge") {
                EXPECT_DOUBLE_EQ(in.ondemand_usd_h, in.region == "us-east-1" ? 0.01 : 5.0) << in.key();
            }
        }
    }
    Catalog d = Catalog::builtin().value();
    EXPECT_EQ(d.apply_overrides("discounts = 0.5\n", "o.toml").message(),
              "o.toml: discounts must be a table ([discounts] with one entry per provider or instance type)");
    EXPECT_FALSE(d.apply_overrides("prices = 3\n", "o.toml").is_ok());
    auto pricey = from_rows("aws,us-east-1,x,T4,1,4,16,25,1e308,,src\n");
    EXPECT_EQ(pricey.status().message(), "test.csv:2 ondemand_usd_per_hour: 1e+308 is out of range; expected up to 1e+07");
    const std::string gpu_header =
        "name,memory_gb,memory_bw_gbs,fp32_tflops,tensor_tflops,bf16,int8_tops,tdp_w,nvlink_gbs,compute_efficiency,"
        "estimate,source\n";
    auto slow = Catalog::parse(std::string(kHeader) + "aws,us-east-1,x,T4,1,4,16,25,1,,src\n", "test.csv",
                               gpu_header + "T4,16,320,1e-300,,0,0,70,0,1,0,src\n", "gpus.csv", detail::kSpotCsv,
                               "spot.csv");
    EXPECT_EQ(slow.status().message(), "gpus.csv:2 fp32_tflops: 1e-300 is out of range; expected 0.001 to 1e+06");
    auto fine = Catalog::parse(std::string(kHeader) + "aws,us-east-1,x,T4,1,4,16,25,1,,src\n", "test.csv",
                               gpu_header + "T4,16,320,8.1,65,0,130,70,0,0.38,1,src\n", "gpus.csv", detail::kSpotCsv,
                               "spot.csv");
    EXPECT_TRUE(fine.is_ok()) << fine.status().message();
    auto tiny = Catalog::parse(std::string(kHeader) + "aws,us-east-1,x,T4,1,4,16,25,1,,src\n", "test.csv",
                               gpu_header + "T4,16,320,8.1,1e-300,0,0,70,0,1,0,src\n", "gpus.csv", detail::kSpotCsv,
                               "spot.csv");
    EXPECT_EQ(tiny.status().message(), "gpus.csv:2 tensor_tflops: 1e-300 is out of range; expected 0, or 0.001 to 1e+06");
    EXPECT_NE(from_rows("aws,us-east-1,x,T4,-1e300,4,16,25,1,,src\n").status().message().find("from 0 to 1e6"),
              std::string::npos);
    EXPECT_EQ(from_rows("aws,us-east-1,x,T4,1,4,16,25,1,0.2\n").status().message(),
              "test.csv:2: expected 11 fields as in the header, got 10");
}

// Found by review: `[discounts] AWS = 0.3` said "unknown instance type 'AWS'" though a provider is
// a key there too, and suggested nothing (nor 'azure' for "azur").
TEST(Catalog, UnknownDiscountKeysSuggestAProviderOrAType) {
    Catalog c = Catalog::builtin().value();
    EXPECT_EQ(
        c.apply_overrides("[discounts]\nAWS = 0.3\n", "o.toml").message(),
        "o.toml [discounts]: 'AWS' is neither a provider nor an instance type of the catalog; did you mean 'aws'?");
    EXPECT_NE(c.apply_overrides("[discounts]\nazur = 0.3\n", "o.toml").message().find("did you mean 'azure'?"),
              std::string::npos);
    EXPECT_NE(c.apply_overrides("[discounts]\n\"p4d.24xlarg\" = 0.3\n", "o.toml")
                  .message()
                  .find("did you mean 'p4d.24xlarge'?"),
              std::string::npos);
    EXPECT_EQ(c.apply_overrides("[discounts]\nnothing-like-it-at-all = 0.3\n", "o.toml").message(),
              "o.toml [discounts]: 'nothing-like-it-at-all' is neither a provider nor an instance type of the catalog");
    EXPECT_DOUBLE_EQ(c.find("p4d.24xlarge", "us-east-1").value()->ondemand_usd_h, 21.957642);  // nothing applied
}

// Found by review: a GPU table's bf16 column of "true" or "yes" read as no BF16 (only "1" was
// yes), so FP32 jobs ran at the FP32 units' peak instead of TF32; "Y" or "x" passed silently too.
TEST(Catalog, YesNoColumnsAcceptTrueFalseAndRefuseOtherText) {
    const std::string gpu_header =
        "name,memory_gb,memory_bw_gbs,fp32_tflops,tensor_tflops,bf16,int8_tops,tdp_w,nvlink_gbs,compute_efficiency,"
        "estimate,source\n";
    auto with_gpu = [&](const std::string& bf16, const std::string& estimate) {
        return Catalog::parse(std::string(kHeader) + "aws,us-east-1,x,A100,1,4,16,25,1,,src\n", "test.csv",
                              gpu_header + "A100,40,1555,19.5,312," + bf16 + ",624,400,600,1," + estimate + ",src\n",
                              "gpus.csv", detail::kSpotCsv, "spot.csv");
    };
    for (const char* yes : {"1", "true", "TRUE", "Yes"}) {
        auto c = with_gpu(yes, yes);
        ASSERT_TRUE(c.is_ok()) << yes << ": " << c.status().message();
        EXPECT_TRUE(c->gpus()[0].bf16) << yes;
        EXPECT_TRUE(c->gpus()[0].estimate) << yes;
    }
    for (const char* no : {"0", "false", "No", ""}) {
        auto c = with_gpu(no, no);
        ASSERT_TRUE(c.is_ok()) << no << ": " << c.status().message();
        EXPECT_FALSE(c->gpus()[0].bf16) << no;
    }
    EXPECT_EQ(with_gpu("Y", "0").status().message(), "gpus.csv:2 bf16: expected 1 or 0 (true/false, yes/no), got 'Y'");
    auto spot = Catalog::parse(
        std::string(kHeader) + "aws,us-east-1,x,T4,1,4,16,25,1,0.5,src\n", "test.csv", detail::kGpusCsv, "gpus.csv",
        "provider,instance_type,interruptions_per_month,estimate\naws,x,0.1,maybe\n", "spot.csv");
    EXPECT_EQ(spot.status().message(), "spot.csv:2 estimate: expected 1 or 0 (true/false, yes/no), got 'maybe'");
}

// Found by review: an optional column of the GPU table or the spot rates spelt wrong was read as
// absent: "compute_efficency" planned an H100 at twice its calibrated 0.52, "estimte" made every
// rate an estimate. Only known columns are taken.
TEST(Catalog, MisspeltOptionalColumnsOfTheGpuAndSpotTablesAreErrors) {
    const std::string row = std::string(kHeader) + "aws,us-east-1,x,H100,1,4,16,25,1,,src\n";
    auto gpus = Catalog::parse(row, "test.csv",
                               "name,memory_gb,memory_bw_gbs,fp32_tflops,tensor_tflops,bf16,nvlink_gbs,compute_efficency\n"
                               "H100,80,3350,67,989,1,900,0.52\n",
                               "gpus.csv", detail::kSpotCsv, "spot.csv");
    ASSERT_FALSE(gpus.is_ok());
    EXPECT_EQ(gpus.status().message().rfind("gpus.csv:1: unknown column 'compute_efficency' in the header (expected "
                                            "only name, memory_gb, ",
                                            0),
              0u)
        << gpus.status().message();
    auto spot = Catalog::parse(row, "test.csv", detail::kGpusCsv, "gpus.csv",
                               "provider,instance_type,interruptions_per_month,estimte\naws,x,0.1,0\n", "spot.csv");
    ASSERT_FALSE(spot.is_ok());
    EXPECT_EQ(spot.status().message().rfind("spot.csv:1: unknown column 'estimte' in the header", 0), 0u)
        << spot.status().message();
    // The shipped tables' columns, and the required ones alone, still load.
    auto minimal = Catalog::parse(row, "test.csv",
                                  "name,memory_gb,memory_bw_gbs,fp32_tflops,tensor_tflops,bf16,nvlink_gbs\n"
                                  "H100,80,3350,67,989,1,900\n",
                                  "gpus.csv", "provider,instance_type,interruptions_per_month\naws,x,0.1\n", "spot.csv");
    ASSERT_TRUE(minimal.is_ok()) << minimal.status().message();
    EXPECT_EQ(minimal->gpus()[0].compute_efficiency, 1);
    EXPECT_TRUE(Catalog::builtin().is_ok());
}

// Found by review: a row whose spot price equals its on-demand one (SkyPilot's mark for "no spot
// data", as on Azure's H100 rows) was planned as a real spot market without a word.
TEST(Catalog, SpotEqualToOnDemandIsWarnedAbout) {
    auto c = from_rows("azure,eastus,Standard_NC40ads_H100_v5,H100,1,40,320,,6.98,6.98,src\n"
                       "aws,us-east-1,x,T4,1,4,16,25,0.5,0.2,src\n");
    ASSERT_TRUE(c.is_ok()) << c.status().message();
    ASSERT_EQ(c->warnings().size(), 1u);
    EXPECT_EQ(c->warnings()[0].rfind("test.csv:2: azure/eastus/Standard_NC40ads_H100_v5 spot equals on-demand (6.98), "
                                     "SkyPilot's mark for no spot data",
                                     0),
              0u)
        << c->warnings()[0];
}

TEST(Catalog, HazardFromMonthlyRate) {
    EXPECT_NEAR(hazard_per_hour(0.3), -std::log(0.7) / 730, 1e-12);
    EXPECT_EQ(hazard_per_hour(0), 0);
}

TEST(Workloads, PresetsValidate) {
    auto all = builtin_workloads();
    ASSERT_TRUE(all.is_ok()) << all.status().message();
    EXPECT_GE(all.value().size(), 6u);
    auto r50 = find_workload("resnet50-imagenet").value();
    EXPECT_NEAR(r50.fwd_flops, 8.178e9, 1e6);
    EXPECT_EQ(r50.dataset_samples, 1281167);
    EXPECT_NE(find_workload("resnet5").status().message().find("presets:"), std::string::npos);
    // Found by review: "ResNet50-ImageNet" was an unknown workload while --gpu a100 is the A100.
    auto any_case = find_workload("ResNet50-ImageNet");
    ASSERT_TRUE(any_case.is_ok()) << any_case.status().message();
    EXPECT_EQ(any_case->name, "resnet50-imagenet");
    // Found by review: GPT-2 trains with AdamW; it was planned with SGD's optimizer state.
    EXPECT_EQ(r50.optimizer, "sgd");
    EXPECT_EQ(find_workload("gpt2-124m-openwebtext").value().optimizer, "adam");
}

}  // namespace
}  // namespace strato::cloud
