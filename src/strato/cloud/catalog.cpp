#include "strato/core/toml_guard.h"
#include "strato/cloud/catalog.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <tuple>
#include <unordered_map>
#include <toml++/toml.h>

#include "strato/core/csv_table.h"
#include "strato/core/config.h"
#include "strato/core/fs.h"

namespace strato::cloud {

std::string Instance::key() const { return fmt::format("{}/{}/{}", provider, region, type); }

double hazard_per_hour(double interruptions_per_month) {
    double p = std::clamp(interruptions_per_month, 0.0, 0.999);
    return -std::log1p(-p) / 730.0;
}

bool detail::equals_any_case(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
}

namespace {

std::string lowercase(std::string s) {
    for (char& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
}

/// A yes/no column: 1/0, true/false or yes/no in any case; blank is `blank`. Anything else is an
/// error ("Y" or "x" read as "no" made a BF16 GPU run FP32 math at the FP32 units' peak).
Result<bool> parse_flag(std::string_view v, bool blank, const std::string& where) {
    const std::string s = lowercase(std::string(v));
    if (s.empty()) return blank;
    if (s == "1" || s == "true" || s == "yes") return true;
    if (s == "0" || s == "false" || s == "no") return false;
    return invalid_argument("{}: expected 1 or 0 (true/false, yes/no), got '{}'", where, v);
}

Result<std::vector<GpuSpec>> parse_gpus(std::string_view text, std::string_view source) {
    STRATO_ASSIGN_OR_RETURN(CsvTable t, CsvTable::parse(text, std::string(source)));
    STRATO_RETURN_IF_ERROR(t.require_columns(
        {"name", "memory_gb", "memory_bw_gbs", "fp32_tflops", "tensor_tflops", "bf16", "nvlink_gbs"}));
    // The optional columns change the numbers: a misspelt "compute_efficency" was read as absent,
    // and an H100 planned twice as fast as its 0.52.
    STRATO_RETURN_IF_ERROR(
        t.only_columns({"name", "memory_gb", "memory_bw_gbs", "fp32_tflops", "tensor_tflops", "bf16", "int8_tops",
                        "tdp_w", "nvlink_gbs", "compute_efficiency", "estimate", "source"}));
    std::vector<GpuSpec> out;
    for (size_t r = 0; r < t.rows(); ++r) {
        auto where = [&](std::string_view col) {
            return col.empty() ? fmt::format("{}:{}", t.source(), t.line(r))
                               : fmt::format("{}:{} {}", t.source(), t.line(r), col);
        };
        GpuSpec g;
        g.name = t.at(r, "name");
        if (g.name.empty()) return invalid_argument("{}: empty GPU name", where("name"));
        STRATO_ASSIGN_OR_RETURN(g.memory_gb, parse_number(t.at(r, "memory_gb"), 0, where("memory_gb")));
        STRATO_ASSIGN_OR_RETURN(g.memory_bw_gbs, parse_number(t.at(r, "memory_bw_gbs"), 0, where("memory_bw_gbs")));
        STRATO_ASSIGN_OR_RETURN(g.fp32_tflops, parse_number(t.at(r, "fp32_tflops"), 0, where("fp32_tflops")));
        STRATO_ASSIGN_OR_RETURN(g.tensor_tflops, parse_number(t.at(r, "tensor_tflops"), 0, where("tensor_tflops")));
        STRATO_ASSIGN_OR_RETURN(g.int8_tops, parse_number(t.at(r, "int8_tops"), 0, where("int8_tops")));
        STRATO_ASSIGN_OR_RETURN(g.tdp_w, parse_number(t.at(r, "tdp_w"), 0, where("tdp_w")));
        STRATO_ASSIGN_OR_RETURN(g.nvlink_gbs, parse_number(t.at(r, "nvlink_gbs"), 0, where("nvlink_gbs")));
        STRATO_ASSIGN_OR_RETURN(g.compute_efficiency,
                                parse_number(t.at(r, "compute_efficiency"), 1, where("compute_efficiency")));
        if (!(g.compute_efficiency > 0 && g.compute_efficiency <= 2))
            return invalid_argument("{}: expected a factor in (0, 2]", where("compute_efficiency"));
        STRATO_ASSIGN_OR_RETURN(g.bf16, parse_flag(t.at(r, "bf16"), false, where("bf16")));
        STRATO_ASSIGN_OR_RETURN(g.estimate, parse_flag(t.at(r, "estimate"), false, where("estimate")));
        g.source = t.at(r, "source");
        if (g.memory_gb <= 0 || g.memory_bw_gbs <= 0 || g.fp32_tflops <= 0)
            return invalid_argument("{}: GPU '{}' needs memory_gb, memory_bw_gbs and fp32_tflops > 0", where(""),
                                    g.name);
        for (const auto& [col, v] : {std::pair<const char*, double>{"tensor_tflops", g.tensor_tflops},
                                     {"int8_tops", g.int8_tops}, {"tdp_w", g.tdp_w}, {"nvlink_gbs", g.nvlink_gbs}})
            if (v < 0) return invalid_argument("{}: must not be negative, got {:g}", where(col), v);
        // Far beyond any GPU, or so small that a plan's times overflow: a typo, not a GPU.
        for (const auto& [col, v, lo, hi] :
             {std::tuple<const char*, double, double, double>{"memory_gb", g.memory_gb, 0, 1e5},
              {"memory_bw_gbs", g.memory_bw_gbs, 1e-3, 1e6},
              {"fp32_tflops", g.fp32_tflops, 1e-3, 1e6},
              {"tensor_tflops", g.tensor_tflops, 1e-3, 1e6},
              {"int8_tops", g.int8_tops, 1e-3, 1e6},
              {"tdp_w", g.tdp_w, 1e-3, 1e5},
              {"nvlink_gbs", g.nvlink_gbs, 1e-3, 1e6}})
            if (v > hi || (v > 0 && v < lo))
                return invalid_argument("{}: {:g} is out of range; expected {}{:g}", where(col), v,
                                        col == std::string_view("memory_bw_gbs") || col == std::string_view("fp32_tflops")
                                            ? fmt::format("{:g} to ", lo)
                                        : lo > 0 ? fmt::format("0, or {:g} to ", lo)
                                                 : "up to ",
                                        hi);
        // (in any case: an accelerator finds its entry in any case, so "t4" after "T4" is the T4 again)
        for (const auto& other : out)
            if (detail::equals_any_case(other.name, g.name))
                return invalid_argument("{}: GPU '{}' is listed twice{}", where("name"), g.name,
                                        other.name == g.name ? "" : fmt::format(" (also as '{}')", other.name));
        if (g.tensor_tflops <= 0) g.tensor_tflops = g.fp32_tflops;
        out.push_back(std::move(g));
    }
    return out;
}

struct SpotRate {
    std::string provider, type;
    double per_month;
    bool estimate;
};

Result<std::vector<SpotRate>> parse_spot(std::string_view text, std::string_view source) {
    STRATO_ASSIGN_OR_RETURN(CsvTable t, CsvTable::parse(text, std::string(source)));
    STRATO_RETURN_IF_ERROR(t.require_columns({"provider", "instance_type", "interruptions_per_month"}));
    STRATO_RETURN_IF_ERROR(  // (a misspelt "estimte" was read as absent: every rate an estimate)
        t.only_columns({"provider", "instance_type", "savings_pct", "interruptions_per_month", "estimate", "source"}));
    std::vector<SpotRate> out;
    for (size_t r = 0; r < t.rows(); ++r) {
        SpotRate s{t.at(r, "provider"), t.at(r, "instance_type"), 0, true};
        STRATO_ASSIGN_OR_RETURN(
            s.estimate, parse_flag(t.at(r, "estimate"), true, fmt::format("{}:{} estimate", t.source(), t.line(r))));
        std::string where = fmt::format("{}:{} interruptions_per_month", t.source(), t.line(r));
        STRATO_ASSIGN_OR_RETURN(s.per_month, parse_number(t.at(r, "interruptions_per_month"), -1, where));
        if (s.per_month < 0 || s.per_month >= 1)
            return invalid_argument("{}: expected a fraction in [0, 1), got '{}'", where,
                                    t.at(r, "interruptions_per_month"));
        for (const auto& other : out)
            if (detail::equals_any_case(other.provider, s.provider) && other.type == s.type)  // (as match_spot)
                return invalid_argument("{}:{}: {}/{} is listed twice", t.source(), t.line(r), s.provider, s.type);
        out.push_back(std::move(s));
    }
    return out;
}

const SpotRate* match_spot(const std::vector<SpotRate>& rates, const Instance& inst) {
    // Most specific first: provider+type, provider+*, *+*.
    for (int pass = 0; pass < 3; ++pass) {
        for (const auto& s : rates) {
            // (a provider in any case: a catalog's "AWS" rows are AWS's, with its Advisor rates)
            bool p = detail::equals_any_case(s.provider, inst.provider), t = s.type == inst.type;
            if ((pass == 0 && p && t) || (pass == 1 && p && s.type == "*") ||
                (pass == 2 && s.provider == "*" && s.type == "*"))
                return &s;
        }
    }
    return nullptr;
}

}  // namespace

Result<Catalog> Catalog::parse(std::string_view instances, std::string_view instances_source, std::string_view gpus,
                               std::string_view gpus_source, std::string_view spot, std::string_view spot_source) {
    Catalog c;
    STRATO_ASSIGN_OR_RETURN(c.gpus_, parse_gpus(gpus, gpus_source));
    STRATO_ASSIGN_OR_RETURN(std::vector<SpotRate> rates, parse_spot(spot, spot_source));
    STRATO_ASSIGN_OR_RETURN(CsvTable t, CsvTable::parse(instances, std::string(instances_source)));
    if (Status st =
            t.require_columns({"provider", "region", "instance_type", "accelerator", "accelerator_count", "vcpus",
                               "memory_gib", "network_gbps", "ondemand_usd_per_hour", "spot_usd_per_hour"});
        !st.is_ok()) {
        // A SkyPilot catalog snapshot (catalogs/vN/<cloud>/vms.csv) is the file people have at hand.
        const std::string_view header = instances.substr(0, instances.find_first_of("\r\n"));
        if (header.find("InstanceType") != std::string_view::npos && header.find("Price") != std::string_view::npos)
            return invalid_argument(
                "{}; this is a SkyPilot vms.csv: convert it with scripts/cloud/refresh_catalog.py "
                "--aws/--gcp/--azure FILE --out instances.csv (docs/plan.md, The catalog)",
                st.message());
        return st;
    }
    // Providers and regions match in any case (`--provider AWS`), so "AWS/us-east-1/x" repeats
    // "aws/us-east-1/x": both rows were planned, the same machine twice in the ranking.
    std::unordered_map<std::string, std::pair<int, std::string>> lines_by_key;
    for (size_t r = 0; r < t.rows(); ++r) {
        auto where = [&](std::string_view col) {
            return col.empty() ? fmt::format("{}:{}", t.source(), t.line(r))
                               : fmt::format("{}:{} {}", t.source(), t.line(r), col);
        };
        Instance in;
        in.provider = t.at(r, "provider");
        in.region = t.at(r, "region");
        in.type = t.at(r, "instance_type");
        in.accelerator = t.at(r, "accelerator");
        in.source = t.at(r, "source");
        in.line = t.line(r);
        if (in.provider.empty() || in.type.empty())
            return invalid_argument("{}: provider and instance_type must not be empty", where(""));
        double gpus_n = 0, vcpus = 0;
        STRATO_ASSIGN_OR_RETURN(gpus_n, parse_number(t.at(r, "accelerator_count"), 0, where("accelerator_count")));
        STRATO_ASSIGN_OR_RETURN(vcpus, parse_number(t.at(r, "vcpus"), 0, where("vcpus")));
        if (!(gpus_n >= 0 && vcpus >= 0 && gpus_n <= 1e6 && vcpus <= 1e6) || gpus_n != std::floor(gpus_n) ||
            vcpus != std::floor(vcpus))  // (all before the casts below: -1e300 is no int)
            return invalid_argument("{}: accelerator_count and vcpus must be whole numbers from 0 to 1e6, got {:g} and {:g}",
                                    where(""), gpus_n, vcpus);
        in.gpus = static_cast<int>(gpus_n);
        in.vcpus = static_cast<int>(vcpus);
        STRATO_ASSIGN_OR_RETURN(in.memory_gib, parse_number(t.at(r, "memory_gib"), 0, where("memory_gib")));
        STRATO_ASSIGN_OR_RETURN(in.network_gbps, parse_number(t.at(r, "network_gbps"), kUnknown, where("network_gbps")));
        STRATO_ASSIGN_OR_RETURN(in.ondemand_usd_h,
                                parse_number(t.at(r, "ondemand_usd_per_hour"), kUnknown, where("ondemand_usd_per_hour")));
        STRATO_ASSIGN_OR_RETURN(in.spot_usd_h,
                                parse_number(t.at(r, "spot_usd_per_hour"), kUnknown, where("spot_usd_per_hour")));
        for (const auto& [col, v] : {std::pair<const char*, double>{"accelerator_count", gpus_n},
                                     {"vcpus", vcpus},
                                     {"memory_gib", in.memory_gib},
                                     {"network_gbps", in.network_gbps},
                                     {"ondemand_usd_per_hour", in.ondemand_usd_h},
                                     {"spot_usd_per_hour", in.spot_usd_h}})
            if (v < 0) return invalid_argument("{}: must not be negative, got {:g}", where(col), v);
        // A price past 1e7 an hour (as --prices allows) or a network past 1e5 Gb/s is a typo;
        // 1e308 made every cost inf, and ties of inf ranked as "cheapest".
        for (const auto& [col, v, hi] : {std::tuple<const char*, double, double>{"memory_gib", in.memory_gib, 1e8},
                                         {"network_gbps", in.network_gbps, 1e5},
                                         {"ondemand_usd_per_hour", in.ondemand_usd_h, 1e7},
                                         {"spot_usd_per_hour", in.spot_usd_h, 1e7}})
            if (v > hi) return invalid_argument("{}: {:g} is out of range; expected up to {:g}", where(col), v, hi);
        if (auto [it, fresh] = lines_by_key.emplace(lowercase(in.provider) + "/" + lowercase(in.region) + "/" + in.type,
                                                    std::pair{in.line, in.key()});
            !fresh)
            return invalid_argument(
                "{}: {} is listed twice (also on line {}{})", where("instance_type"), in.key(), it->second.first,
                it->second.second == in.key()
                    ? ""
                    : fmt::format(", as {}; providers and regions match in any case", it->second.second));
        in.list_ondemand_usd_h = in.ondemand_usd_h;
        if (!in.has_ondemand() && !in.has_spot())
            c.warnings_.push_back(fmt::format("{}: {} has no price; left out of plans", where(""), in.key()));
        if (in.gpus == 0)
            c.warnings_.push_back(fmt::format("{}: {} has no accelerators; left out of plans", where(""), in.key()));
        else if (in.accelerator.empty())  // (was left out without a word)
            c.warnings_.push_back(fmt::format("{}: {} has {} accelerators but no accelerator name; left out of plans",
                                              where(""), in.key(), in.gpus));
        if (in.has_ondemand() && in.has_spot() && in.spot_usd_h > in.ondemand_usd_h)
            c.warnings_.push_back(fmt::format("{}: {} spot {:.4g} is above on-demand {:.4g} (catalog inconsistency)",
                                              where(""), in.key(), in.spot_usd_h, in.ondemand_usd_h));
        else if (in.has_ondemand() && in.has_spot() && in.spot_usd_h == in.ondemand_usd_h)
            // (SkyPilot's snapshots mark a spot market they have no data for so: Azure's H100 rows)
            c.warnings_.push_back(fmt::format("{}: {} spot equals on-demand ({:.4g}), SkyPilot's mark for no spot data; "
                                              "planned as a spot market at that price (leave spot blank if there is none)",
                                              where(""), in.key(), in.spot_usd_h));
        if (!in.accelerator.empty() && !c.gpu(in.accelerator))  // (here, so warnings come in line order)
            c.warnings_.push_back(fmt::format("{}: {}: accelerator '{}' is not in the GPU table; left out of plans",
                                              where(""), in.key(), in.accelerator));
        if (const SpotRate* s = match_spot(rates, in)) {
            in.spot_interruptions_per_month = s->per_month;
            in.spot_rate_estimated = s->estimate;
        }
        c.instances_.push_back(std::move(in));
    }
    if (c.instances_.empty()) return invalid_argument("{}: the catalog has no instances (only a header)", instances_source);
    c.link_gpus();
    return c;
}

void Catalog::link_gpus() {
    for (auto& in : instances_) in.gpu = gpu(in.accelerator);
}

Result<Catalog> Catalog::builtin() {
    return parse(detail::kInstancesCsv, "data/cloud/instances.csv", detail::kGpusCsv, "data/cloud/gpus.csv",
                 detail::kSpotCsv, "data/cloud/spot_interruptions.csv");
}

Result<Catalog> Catalog::load(const std::string& instances_csv, const std::string& gpus_csv,
                              const std::string& spot_csv) {
    STRATO_ASSIGN_OR_RETURN(std::string inst, fs::read_file(instances_csv, fs::kTextFileLimit));
    std::string gpus = detail::kGpusCsv, gpus_src = "data/cloud/gpus.csv";
    std::string spot = detail::kSpotCsv, spot_src = "data/cloud/spot_interruptions.csv";
    if (!gpus_csv.empty()) {
        STRATO_ASSIGN_OR_RETURN(gpus, fs::read_file(gpus_csv, fs::kTextFileLimit));
        gpus_src = gpus_csv;
    }
    if (!spot_csv.empty()) {
        STRATO_ASSIGN_OR_RETURN(spot, fs::read_file(spot_csv, fs::kTextFileLimit));
        spot_src = spot_csv;
    }
    return parse(inst, instances_csv, gpus, gpus_src, spot, spot_src);
}

const GpuSpec* Catalog::gpu(std::string_view name) const {
    for (const auto& g : gpus_)
        if (g.name == name) return &g;
    // In any case next: SkyPilot and the clouds spell accelerators "A100", "a100" or "nvidia-a100"
    // alike for the same card; "t4" in a catalog is the T4.
    for (const auto& g : gpus_)
        if (detail::equals_any_case(g.name, name)) return &g;
    return nullptr;
}

Status Catalog::unknown_type(std::string_view type) const {
    std::string best;
    size_t best_d = SIZE_MAX;
    for (const auto& in : instances_) {
        // (the same name in another case first: "standard_nc24ads_a100_v4", "P4D.24XLARGE")
        size_t d = detail::equals_any_case(type, in.type) ? 0 : config::edit_distance(type, in.type);
        if (d < best_d) best_d = d, best = in.type;
    }
    std::string hint = best_d <= std::max<size_t>(3, type.size() / 3) ? fmt::format("; did you mean '{}'?", best) : "";
    return not_found("unknown instance type '{}' (not in the catalog){}", type, hint);
}

Result<const Instance*> Catalog::find(std::string_view type, std::string_view region) const {
    const Instance* best = nullptr;
    bool type_seen = false;
    for (const auto& in : instances_) {
        if (in.type != type) continue;
        type_seen = true;
        // (a region in any case, as `strato plan --region` takes it: "US-EAST-1" is us-east-1)
        if (!region.empty() && !detail::equals_any_case(in.region, region)) continue;
        if (!best || (in.has_ondemand() && (!best->has_ondemand() || in.ondemand_usd_h < best->ondemand_usd_h)))
            best = &in;
    }
    if (best) return best;
    if (!type_seen) return unknown_type(type);
    std::vector<std::string> regions;
    for (const auto& in : instances_)
        if (in.type == type) regions.push_back(in.region);
    return not_found("instance type '{}' is not offered in region '{}' (catalog regions: {})", type, region,
                     fmt::join(regions, ", "));
}

Status Catalog::apply_overrides_file(const std::string& path) {
    STRATO_ASSIGN_OR_RETURN(std::string text, fs::read_file(path, fs::kTextFileLimit));
    return apply_overrides(text, path);
}

Status Catalog::apply_overrides(std::string_view toml_text, const std::string& source) {
    // All or nothing: a file refused half way (a bad price after a currency) changes nothing.
    const Currency saved_currency = currency_;
    std::vector<std::array<double, 2>> saved_prices;
    for (const auto& in : instances_) saved_prices.push_back({in.ondemand_usd_h, in.spot_usd_h});
    auto apply = [&]() -> Status {
        STRATO_ASSIGN_OR_RETURN(toml::table doc, parse_toml_named(toml_text, source));
        auto fraction = [&](const toml::node& n, std::string_view key) -> Result<double> {
            auto v = n.value<double>();
            if (!v || !(*v >= 0 && *v < 1)) return invalid_argument("{}: {} must be a fraction in [0, 1)", source, key);
            return *v;
        };
        auto type_known = [&](std::string_view t) {
            return std::any_of(instances_.begin(), instances_.end(), [&](const Instance& in) {
                return in.type == t || in.key() == t || in.provider == t;
            });
        };
        // A [discounts] key may be a provider as well as a type: suggest the nearest of both
        // ("AWS" is aws, "azur" azure), not an instance type alone.
        auto unknown_discount_key = [&](const std::string& key) -> Status {
            std::string best;
            size_t best_d = SIZE_MAX;
            for (const auto& in : instances_)
                for (const std::string* name : {&in.provider, &in.type}) {
                    const size_t d = detail::equals_any_case(key, *name) ? 0 : config::edit_distance(key, *name);
                    if (d < best_d) best_d = d, best = *name;
                }
            const std::string hint =
                best_d <= std::max<size_t>(3, key.size() / 3) ? fmt::format("; did you mean '{}'?", best) : "";
            return not_found("{} [discounts]: '{}' is neither a provider nor an instance type of the catalog{}", source,
                             key, hint);
        };
        double global = 0;
        for (auto&& [k, node] : doc) {
            std::string key(k.str());
            if (key == "currency") {
                auto v = node.value<std::string>();
                if (!v || (*v != "USD" && *v != "CNY"))
                    return invalid_argument("{}: currency must be \"USD\" or \"CNY\"", source);
                currency_.code = *v;
            } else if (key == "usd_to_cny") {
                auto v = node.value<double>();
                if (!v || !(*v > 0 && *v <= 1e6)) return invalid_argument("{}: usd_to_cny must be a number in (0, 1e6]", source);
                currency_.per_usd = *v;
            } else if (key == "discount") {
                STRATO_ASSIGN_OR_RETURN(global, fraction(node, "discount"));
            } else if (key == "discounts" || key == "prices") {
                if (!node.is_table())
                    return invalid_argument("{}: {} must be a table ([{}] with one entry per provider or instance type)",
                                            source, key, key);
            } else {
                return invalid_argument("{}: unknown key '{}' (expected currency, usd_to_cny, discount, [discounts], [prices])",
                                        source, key);
            }
        }
        if (currency_.code == "USD") currency_.per_usd = 1.0;
        else if (!doc.contains("usd_to_cny"))
            return invalid_argument("{}: currency = \"CNY\" needs usd_to_cny (CNY per USD)", source);

        // Discounts: the most specific of instance key > type > provider > global.
        std::vector<std::pair<std::string, double>> discounts;
        if (auto* t = doc["discounts"].as_table()) {
            for (auto&& [k, node] : *t) {
                std::string key(k.str());
                if (!type_known(key)) return unknown_discount_key(key);
                STRATO_ASSIGN_OR_RETURN(double d, fraction(node, fmt::format("discounts.{}", key)));
                discounts.emplace_back(key, d);
            }
        }
        for (auto& in : instances_) {
            double d = global;
            int rank = 0;
            for (const auto& [k, v] : discounts) {
                int r = k == in.key() ? 3 : k == in.type ? 2 : k == in.provider ? 1 : 0;
                if (r > rank) rank = r, d = v;
            }
            in.ondemand_usd_h = in.list_ondemand_usd_h * (1 - d);
        }
        struct Price {
            std::string key;
            bool ondemand;
            double value;
        };
        std::vector<Price> prices;
        if (auto* t = doc["prices"].as_table()) {
            for (auto&& [k, node] : *t) {
                std::string key(k.str());
                if (!type_known(key)) return unknown_type(key).with_context(fmt::format("{} [prices]", source));
                // A price is per node type (a provider's types differ tenfold); discounts take providers.
                if (std::none_of(instances_.begin(), instances_.end(),
                                 [&](const Instance& in) { return in.type == key || in.key() == key; }))
                    return invalid_argument("{}: prices.\"{}\": a price is set per instance type (\"p4d.24xlarge\" or "
                                            "\"aws/us-east-1/p4d.24xlarge\"), not per provider; use [discounts] for a "
                                            "provider",
                                            source, key);
                auto* p = node.as_table();
                if (!p) return invalid_argument("{}: prices.\"{}\" must be a table with ondemand and/or spot", source, key);
                for (auto&& [pk, pv] : *p) {
                    std::string field(pk.str());
                    auto v = pv.value<double>();
                    // 0 is how the catalog says "not offered": a price here must be one.
                    if ((field != "ondemand" && field != "spot") || !v || !(*v > 0 && *v <= 1e7))
                        return invalid_argument("{}: prices.\"{}\".{}: expected ondemand or spot = a price per hour in (0, "
                                                "1e7]",
                                                source, key, field);
                    // In the declared currency (a CNY price list is in CNY); kept in USD like the catalog.
                    prices.push_back({key, field == "ondemand", *v / currency_.per_usd});
                }
            }
        }
        // A region's price ("aws/us-east-1/g4dn.xlarge") wins over its type's ("g4dn.xlarge"),
        // whichever the file lists first.
        for (bool by_key : {false, true})
            for (const auto& [key, ondemand, v] : prices)
                for (auto& in : instances_)
                    if (by_key ? in.key() == key : in.type == key) (ondemand ? in.ondemand_usd_h : in.spot_usd_h) = v;
        return Status::ok();
    };
    Status st = apply();
    if (!st.is_ok()) {
        currency_ = saved_currency;
        for (size_t i = 0; i < instances_.size(); ++i)
            instances_[i].ondemand_usd_h = saved_prices[i][0], instances_[i].spot_usd_h = saved_prices[i][1];
    }
    return st;
}

}  // namespace strato::cloud
