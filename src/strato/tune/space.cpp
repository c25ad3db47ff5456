#include "strato/core/toml_guard.h"
#include "strato/tune/space.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <toml++/toml.h>

#include "strato/core/duration.h"
#include "strato/core/fs.h"
#include "strato/core/json.h"
#include "strato/core/log.h"
#include "strato/train/train_config.h"
#include "strato/tune/sampler.h"

namespace strato::tune {

// Quantised values (an int, a q) own half a step on each side, the ends included: drawn on [low,
// high] and rounded, low and high came up half as often as the values between (Optuna draws on
// [low - q/2, high + q/2] for the same reason).
static double half_step(const Param& p) {
    if (p.dist == Dist::kLogUniform || !p.numeric()) return 0;
    return p.q > 0 ? p.q / 2 : p.dist == Dist::kInt ? 0.5 : 0;
}

double Param::internal_low() const {
    return dist == Dist::kLogUniform ? std::log(low) : numeric() ? low - half_step(*this) : 0;
}
double Param::internal_high() const {
    return dist == Dist::kLogUniform ? std::log(high)
           : numeric()              ? high + half_step(*this)
                                    : static_cast<double>(values.size()) - 1;
}

double Param::to_internal(const std::string& literal) const {
    if (!numeric()) {
        auto it = std::find(values.begin(), values.end(), literal);
        return it == values.end() ? 0 : static_cast<double>(it - values.begin());
    }
    double v = std::stod(literal);
    return dist == Dist::kLogUniform ? std::log(v) : v;
}

std::string Param::from_internal(double x) const {
    x = std::clamp(x, internal_low(), internal_high());
    if (!numeric()) return values[static_cast<size_t>(std::lround(x))];
    double v = dist == Dist::kLogUniform ? std::exp(x) : x;
    if (q > 0) v = low + std::round((v - low) / q) * q;
    v = std::clamp(v, low, high);
    if (dist == Dist::kInt) return fmt::format("{}", static_cast<int64_t>(std::llround(v)));
    // 15 digits (found by review: 6 made every draw of [1e6, 1e6 + 10] "1e+06", one trial run
    // over and over), and no more: they drop a q lattice's sums' and log/exp's rounding (0.3, not
    // 0.30000000000000004; 256, not 255.99999999999994).
    return fmt::format("{:.15g}", v);
}

namespace {

std::string unquoted(const std::string& s) {
    return s.size() >= 2 && s.front() == '"' && s.back() == '"' ? s.substr(1, s.size() - 2) : s;
}

std::string literal(const toml::node& n) {
    // (JSON's escapes are TOML's: a value with a quote or a backslash stays itself; "C:\\new",
    // written as "C:\new" between quotes, reached the trial as C, colon, newline, "ew")
    if (auto s = n.value_exact<std::string>()) return json_text(nlohmann::json(*s));
    if (auto i = n.value_exact<int64_t>()) return std::to_string(*i);
    // Ten digits where they give the number back (as studies have recorded it), else all it needs:
    // 0.123456789012 reached the trial as 0.123456789 (and 0.123456789013 beside it was "twice").
    if (auto d = n.value_exact<double>()) {
        std::string l = fmt::format("{:.10g}", *d);
        for (int digits = 11; digits <= 17 && std::isfinite(*d) && std::strtod(l.c_str(), nullptr) != *d; ++digits)
            l = fmt::format("{:.{}g}", *d, digits);
        return l;
    }
    if (auto b = n.value_exact<bool>()) return *b ? "true" : "false";
    return {};
}

Result<Param> parse_param(const std::string& key, const toml::node& node, const std::string& where) {
    auto* t = node.as_table();
    if (!t) return invalid_argument("{}: expected {{ type = ..., ... }}", where);
    Param p;
    p.key = key;
    std::string type = (*t)["type"].value_or(std::string());
    static const std::pair<const char*, Dist> kTypes[] = {{"uniform", Dist::kUniform}, {"loguniform", Dist::kLogUniform},
                                                          {"int", Dist::kInt}, {"choice", Dist::kChoice},
                                                          {"grid", Dist::kGrid}};
    bool found = false;
    for (auto [name, d] : kTypes)
        if (type == name) p.dist = d, found = true;
    if (!found)
        return invalid_argument("{}: unknown distribution '{}' (expected uniform, loguniform, int, choice or grid)", where,
                                type);
    for (auto&& [k, v] : *t) {
        std::string_view kk = k.str();
        if (kk != "type" && kk != "low" && kk != "high" && kk != "q" && kk != "values" && kk != "when")
            return invalid_argument("{}: unknown key '{}' (expected type, low, high, q, values, when)", where, kk);
        // A key of the other kind of distribution was ignored: values = [...] beside a uniform's
        // low and high, low and high on a choice; the study searched what the file did not say.
        const bool for_numbers = kk == "low" || kk == "high" || kk == "q";
        if ((p.numeric() && kk == "values") || (!p.numeric() && for_numbers))
            return invalid_argument("{}: {} takes no '{}' (expected {})", where, type, kk,
                                    p.numeric() ? "type, low, high, q, when" : "type, values, when");
    }
    if (p.numeric()) {
        auto lo = (*t)["low"].value<double>(), hi = (*t)["high"].value<double>();
        if (!lo || !hi) return invalid_argument("{}: {} needs low and high numbers", where, type);
        p.low = *lo, p.high = *hi;
        if (const toml::node* q = t->get("q")) {
            auto qv = q->value<double>();
            if (!qv) return invalid_argument("{}: q must be a number", where);
            p.q = *qv;
        }
        if (!std::isfinite(p.low) || !std::isfinite(p.high) || !std::isfinite(p.q))
            return invalid_argument("{}: low, high and q must be finite numbers", where);
        // A range wider than the largest double ([-1e308, 1e308]): its draws were inf, clamped to
        // high (every trial ran 1e308), and TPE's densities 0 / 0.
        if (!std::isfinite(p.high - p.low))
            return invalid_argument("{}: the range [{:g}, {:g}] is wider than a double can hold", where, p.low, p.high);
        if (p.dist == Dist::kInt && (p.low != std::floor(p.low) || p.high != std::floor(p.high)))
            return invalid_argument("{}: int needs whole-number low and high, got {} and {}", where, p.low, p.high);
        if (p.dist == Dist::kInt && (std::fabs(p.low) > 0x1p53 || std::fabs(p.high) > 0x1p53))
            return invalid_argument("{}: int low and high must lie within +-2^53, got {:g} and {:g}", where, p.low, p.high);
        if (p.low == p.high)
            return invalid_argument("{}: low and high are both {}: nothing to tune\nhint: a fixed value goes in the "
                                    "study's set = [\"{}={}\"]",
                                    where, p.low, key, p.low);
        if (!(p.low < p.high)) return invalid_argument("{}: low {} must be below high {}", where, p.low, p.high);
        if (p.dist == Dist::kLogUniform && p.low <= 0) return invalid_argument("{}: loguniform needs low > 0", where);
        if (p.q < 0) return invalid_argument("{}: q must be >= 0", where);
        if (p.q > 0) {
            // Drawn values are low + k q: a high off that lattice was drawn anyway (clamped), as a
            // value no other draw could give. It comes down to the lattice, as Optuna does.
            if (p.dist == Dist::kLogUniform) return invalid_argument("{}: q is for uniform and int, not loguniform", where);
            if (p.dist == Dist::kInt && p.q != std::floor(p.q))
                return invalid_argument("{}: int needs a whole-number q, got {}", where, p.q);
            const double steps = std::floor((p.high - p.low) / p.q + 1e-9);
            if (steps < 1) return invalid_argument("{}: q {} is larger than high - low ({})", where, p.q, p.high - p.low);
            // A q so small that (high - low) / q has no exact double (5e-324 made it inf, and the
            // highest value drawn inf): more than 2^53 steps is no lattice at all.
            if (!(steps <= 0x1p53))
                return invalid_argument("{}: q {:g} is too small for the range [{:g}, {:g}] (more than 2^53 steps); "
                                        "leave q out for a continuous range",
                                        where, p.q, p.low, p.high);
            const double on_lattice = p.low + steps * p.q;
            if (std::fabs(on_lattice - p.high) > 1e-9 * std::max(1.0, std::fabs(p.high))) {
                log::warn("{}: high {} is not low + a multiple of q {}; the highest value drawn is {}", where, p.high, p.q,
                          on_lattice);
                p.high = on_lattice;
            }
        }
    } else {
        auto* arr = (*t)["values"].as_array();
        if (!arr || arr->empty()) return invalid_argument("{}: {} needs a non-empty values = [...]", where, type);
        for (auto& v : *arr) {
            std::string l = literal(v);
            if (l.empty()) return invalid_argument("{}: values must be strings, numbers or booleans", where);
            // Two equal values were two identical trials (a grid) or twice the weight (a choice).
            if (std::find(p.values.begin(), p.values.end(), l) != p.values.end())
                return invalid_argument("{}: values holds {} twice; list each value once", where, l);
            p.values.push_back(l);
        }
    }
    if (const toml::node* w = t->get("when"); w && !w->is_string())
        return invalid_argument("{}: when must be a string \"other.key == value\"", where);
    if (auto when = (*t)["when"].value<std::string>()) {
        size_t eq = when->find("==");
        if (eq == std::string::npos) return invalid_argument("{}: when must read \"other.key == value\"", where);
        auto trim = [](std::string s) {
            s.erase(0, s.find_first_not_of(' '));
            s.erase(s.find_last_not_of(' ') + 1);
            return s;
        };
        p.when_key = trim(when->substr(0, eq));
        p.when_value = trim(when->substr(eq + 2));
        // (an empty key made the parameter unconditional, without a word)
        if (p.when_key.empty())
            return invalid_argument("{}: when \"{}\" names no parameter; expected \"other.key == value\"", where,
                                    *when);
    }
    return p;
}

// An integer setting: absent gives `def`; another type or a value beyond +-1e9 is an error
// (not a silent default, not a wrapped int).
Result<int> int_setting(const toml::table& t, const char* key, int64_t def, const std::string& where) {
    const toml::node* n = t.get(key);
    if (!n) return static_cast<int>(def);
    auto v = n->value_exact<int64_t>();
    if (!v) return invalid_argument("{}: {} must be an integer", where, key);
    if (*v < -1'000'000'000 || *v > 1'000'000'000) return invalid_argument("{}: {} = {} is out of range", where, key, *v);
    return static_cast<int>(*v);
}

// A string or number setting: absent gives `def`; another type is an error, not the default
// (`scheduler = ["fifo"]` ran ASHA, `memory_limit_gb = "4"` no limit).
Result<std::string> string_setting(const toml::table& t, const char* key, std::string def, const std::string& where) {
    const toml::node* n = t.get(key);
    if (!n) return def;
    auto v = n->value_exact<std::string>();
    if (!v) return invalid_argument("{}: {} must be a string", where, key);
    return *v;
}

Result<double> number_setting(const toml::table& t, const char* key, double def, const std::string& where) {
    const toml::node* n = t.get(key);
    if (!n) return def;
    auto v = n->value<double>();
    if (!v || n->is_boolean()) return invalid_argument("{}: {} must be a number", where, key);
    if (!std::isfinite(*v)) return invalid_argument("{}: {} must be a finite number", where, key);
    return *v;
}

// The metrics every eval line of `strato train`'s metrics.jsonl holds.
constexpr const char* kEvalMetrics[] = {"test_acc", "test_loss", "train_acc", "train_loss", "epoch_time_s", "eval_time_s"};

// Keys the executor sets for every trial: a parameter or `set` on them would be overridden.
constexpr const char* kExecutorKeys[] = {"run.dir", "run.name", "train.epochs", "train.stop_after_epochs", "run.threads"};

bool executor_key(std::string_view key) {
    return std::any_of(std::begin(kExecutorKeys), std::end(kExecutorKeys), [&](const char* k) { return key == k; });
}

}  // namespace

Result<StudyConfig> StudyConfig::parse(std::string_view text, const std::string& source, const std::string& base_dir) {
    STRATO_ASSIGN_OR_RETURN(toml::table doc, parse_toml_named(text, source));
    for (auto&& [k, v] : doc) {
        if (k.str() != "study" && k.str() != "scheduler" && k.str() != "params" && k.str() != "tpe") {
            // (`sampler = "grid"` on the first line was "unknown section 'sampler'")
            if (!v.is_table())
                return invalid_argument("{}:{}: '{}' is a top-level key; keys go under a section (study settings such "
                                        "as sampler under [study]; expected [study], [scheduler], [params], [tpe])",
                                        source, v.source().begin.line, k.str());
            return invalid_argument("{}: unknown section '{}' (expected [study], [scheduler], [params], [tpe])", source,
                                    k.str());
        }
        // `scheduler = "fifo"` above [study] is a top-level key, not the [study] setting: it was
        // ignored and the study ran ASHA.
        if (!v.is_table())
            return invalid_argument("{}:{}: '{}' is a top-level key, not a section (settings such as sampler and "
                                    "scheduler go under [study]; expected [{}] as a table)",
                                    source, v.source().begin.line, k.str(), k.str());
    }
    StudyConfig s;
    s.source = source;
    auto* st = doc["study"].as_table();
    if (!st) return invalid_argument("{}: missing [study] (name, base, metric, trials, ...)", source);
    const std::string in_study = source + " [study]";
    STRATO_ASSIGN_OR_RETURN(s.name, string_setting(*st, "name", "study", in_study));
    // The name is the default study directory (runs/tune/<name>) and the Slurm job's name: "../x"
    // put the study elsewhere, a blank or '%' broke the #SBATCH line.
    if (s.name.empty() || s.name.size() > 100 || s.name[0] == '.' ||
        !std::all_of(s.name.begin(), s.name.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
        }))
        return invalid_argument("{}: name must be 1 to 100 letters, digits, '.', '_' or '-', not starting with '.' (it "
                                "names the study's directory runs/tune/<name> and its Slurm job)",
                                in_study);
    // (base = 5 was "missing base")
    STRATO_ASSIGN_OR_RETURN(const std::string base, string_setting(*st, "base", "", in_study));
    if (base.empty()) return invalid_argument("{} [study]: missing base = \"TRAIN_CONFIG.toml\"", source);
    {
        // Absolute and normalised, so the same study reads the same however it is invoked.
        std::filesystem::path b = std::filesystem::path(base).is_absolute() ? std::filesystem::path(base)
                                                                              : std::filesystem::path(base_dir) / base;
        std::error_code ec;
        s.base = std::filesystem::weakly_canonical(std::filesystem::absolute(b, ec), ec).string();
        if (s.base.empty()) s.base = b.string();
    }
    STRATO_ASSIGN_OR_RETURN(s.metric, string_setting(*st, "metric", "test_acc", in_study));
    if (std::none_of(std::begin(kEvalMetrics), std::end(kEvalMetrics), [&](const char* m) { return s.metric == m; }))
        return invalid_argument("{}: metric '{}' is not in strato train's eval lines (expected one of test_acc, "
                                "test_loss, train_acc, train_loss, epoch_time_s, eval_time_s)",
                                in_study, s.metric);
    const bool lower_is_better = s.metric.find("loss") != std::string::npos || s.metric.find("time") != std::string::npos;
    STRATO_ASSIGN_OR_RETURN(std::string mode, string_setting(*st, "mode", lower_is_better ? "min" : "max", in_study));
    if (mode != "max" && mode != "min") return invalid_argument("{} [study]: mode must be max or min", source);
    s.maximize = mode == "max";
    STRATO_ASSIGN_OR_RETURN(s.trials, int_setting(*st, "trials", 20, source + " [study]"));
    STRATO_ASSIGN_OR_RETURN(s.parallel, int_setting(*st, "parallel", 1, source + " [study]"));
    STRATO_ASSIGN_OR_RETURN(s.threads_per_trial, int_setting(*st, "threads_per_trial", 1, source + " [study]"));
    STRATO_ASSIGN_OR_RETURN(s.sampler, string_setting(*st, "sampler", "tpe", in_study));
    STRATO_ASSIGN_OR_RETURN(s.scheduler, string_setting(*st, "scheduler", "asha", in_study));
    if (const toml::node* seed = st->get("seed")) {
        auto v = seed->value_exact<int64_t>();
        if (!v || *v < 0) return invalid_argument("{}: seed must be a whole number >= 0", in_study);
        s.seed = static_cast<uint64_t>(*v);
    }
    STRATO_ASSIGN_OR_RETURN(s.memory_limit_gb, number_setting(*st, "memory_limit_gb", 0.0, in_study));
    STRATO_ASSIGN_OR_RETURN(s.cpus_per_trial, number_setting(*st, "cpus_per_trial", 0.0, in_study));
    // A hung trial (a dead NFS read, a deadlocked data loader) held `tune run` for ever.
    if (const toml::node* n = st->get("trial_timeout")) {
        const auto v = n->value_exact<std::string>();
        if (!v)
            return invalid_argument("{}: trial_timeout must be a duration string such as \"2h\" or \"90m\" (\"0\": "
                                    "no limit)",
                                    in_study);
        auto secs = parse_duration_s(*v);
        if (!secs) return secs.status().with_context(in_study + " trial_timeout");
        s.trial_timeout_s = *secs;
        s.trial_timeout = *v;
    }
    if (const toml::node* set = st->get("set")) {
        const toml::array* arr = set->as_array();
        if (!arr) return invalid_argument("{}: set must be an array of \"key=value\" strings", in_study);
        for (const auto& v : *arr) {
            auto str = v.value_exact<std::string>();
            if (!str || str->find('=') == std::string::npos)
                return invalid_argument("{}: set must be an array of \"key=value\" strings", in_study);
            std::string key = str->substr(0, str->find('='));
            key.erase(key.find_last_not_of(' ') + 1);
            key.erase(0, key.find_first_not_of(' '));
            if (executor_key(key))
                return invalid_argument("{}: set \"{}\": the executor sets {} for every trial (train.epochs is "
                                        "[scheduler] max_t)",
                                        in_study, *str, key);
            s.fixed.push_back(*str);
        }
    }
    for (const auto& entry : *st) {
        std::string_view k = entry.first.str();
        static const char* kKeys[] = {"name",    "base",    "metric",    "mode", "trials",          "parallel",
                                      "threads_per_trial", "sampler", "scheduler", "seed", "memory_limit_gb", "cpus_per_trial",
                                      "set",  "trial_timeout"};
        if (std::none_of(std::begin(kKeys), std::end(kKeys), [&](const char* x) { return k == x; }))
            return invalid_argument("{} [study]: unknown key '{}'", source, k);
    }
    if (s.trials < 1 || s.parallel < 1 || s.threads_per_trial < 1)
        return invalid_argument("{} [study]: trials, parallel and threads_per_trial must be >= 1", source);
    // (tune run --parallel's bound: parallel = 20000 for 2 started as many trial processes as trials)
    if (s.parallel > kParallelMax)
        return invalid_argument("{} [study]: parallel = {} is more than {} trial processes at once", source, s.parallel,
                                kParallelMax);
    if (s.memory_limit_gb < 0 || s.cpus_per_trial < 0)
        return invalid_argument("{} [study]: memory_limit_gb and cpus_per_trial must be >= 0 (0: no limit)", source);
    // Bounded so that bytes (a cgroup's memory.max, RLIMIT_AS, sbatch --mem) and CPU quotas fit
    // an int64: 1e30 wrote a negative limit and the trials crashed.
    if (s.memory_limit_gb > kMemoryLimitGbMax)
        return invalid_argument("{} [study]: memory_limit_gb = {:g} is more than {:g} (1 PB); 0 means no limit", source,
                                s.memory_limit_gb, kMemoryLimitGbMax);
    if (s.cpus_per_trial > kCpusPerTrialMax)
        return invalid_argument("{} [study]: cpus_per_trial = {:g} is more than {:g}; 0 means no limit", source,
                                s.cpus_per_trial, kCpusPerTrialMax);
    if (s.sampler != "random" && s.sampler != "grid" && s.sampler != "tpe")
        return invalid_argument("{} [study]: sampler must be random, grid or tpe, got '{}'", source, s.sampler);
    if (s.scheduler != "fifo" && s.scheduler != "asha" && s.scheduler != "median")
        return invalid_argument("{} [study]: scheduler must be fifo, asha or median, got '{}'", source, s.scheduler);
    if (auto* sc = doc["scheduler"].as_table()) {
        STRATO_ASSIGN_OR_RETURN(s.grace, int_setting(*sc, "grace", 1, source + " [scheduler]"));
        STRATO_ASSIGN_OR_RETURN(s.max_t, int_setting(*sc, "max_t", 9, source + " [scheduler]"));
        STRATO_ASSIGN_OR_RETURN(s.reduction, int_setting(*sc, "reduction", 3, source + " [scheduler]"));
        STRATO_ASSIGN_OR_RETURN(s.variant, string_setting(*sc, "variant", "promotion", source + " [scheduler]"));
        STRATO_ASSIGN_OR_RETURN(s.brackets, int_setting(*sc, "brackets", 1, source + " [scheduler]"));
        for (auto&& [k, v] : *sc)
            if (k.str() != "grace" && k.str() != "max_t" && k.str() != "reduction" && k.str() != "variant" &&
                k.str() != "brackets")
                return invalid_argument("{} [scheduler]: unknown key '{}' (expected grace, max_t, reduction, variant, "
                                        "brackets)",
                                        source, k.str());
    }
    if (s.grace < 1 || s.max_t < s.grace || s.reduction < 2)
        return invalid_argument("{} [scheduler]: need 1 <= grace <= max_t and reduction >= 2, got grace {}, max_t {} "
                                "and reduction {}",
                                source, s.grace, s.max_t, s.reduction);
    if (s.variant != "promotion" && s.variant != "stopping")
        return invalid_argument("{} [scheduler]: variant must be promotion or stopping", source);
    if (s.brackets < 1 || (s.brackets > 1 && s.scheduler != "asha"))
        return invalid_argument("{} [scheduler]: brackets must be >= 1, and more than 1 only with scheduler = \"asha\"",
                                source);
    // Bracket b starts at grace x reduction^b: past the one that starts at max_t they are all that
    // one (and each took a list of milestones: brackets = 1e9 ran out of memory).
    if (const size_t distinct = s.milestones(0).size(); static_cast<size_t>(s.brackets) > distinct)
        return invalid_argument("{} [scheduler]: brackets = {} is more than the {} distinct brackets of grace {}, max_t {} "
                                "and reduction {} (bracket b starts at grace x reduction^b epochs; the last runs every "
                                "trial to max_t)",
                                source, s.brackets, distinct, s.grace, s.max_t, s.reduction);
    if (auto* tpe = doc["tpe"].as_table()) {
        for (auto&& [k, v] : *tpe)
            if (k.str() != "startup_trials" && k.str() != "candidates")
                return invalid_argument("{} [tpe]: unknown key '{}' (expected startup_trials, candidates)", source, k.str());
        STRATO_ASSIGN_OR_RETURN(s.tpe_startup, int_setting(*tpe, "startup_trials", 10, source + " [tpe]"));
        STRATO_ASSIGN_OR_RETURN(s.tpe_candidates, int_setting(*tpe, "candidates", 24, source + " [tpe]"));
        // No candidates made every TPE trial take a choice's first value, whatever scored best.
        if (s.tpe_startup < 1 || s.tpe_candidates < 1 || s.tpe_candidates > 100000)
            return invalid_argument("{} [tpe]: need startup_trials >= 1 and candidates in 1..100000, got {} and {}", source,
                                    s.tpe_startup, s.tpe_candidates);
    }
    auto* params = doc["params"].as_table();
    if (!params || params->empty()) return invalid_argument("{}: [params] is empty: nothing to tune", source);
    for (auto&& [k, v] : *params) {
        if (executor_key(k.str()))
            return invalid_argument("{} [params] \"{}\": the executor sets it for every trial (train.epochs is "
                                    "[scheduler] max_t); it cannot be tuned",
                                    source, k.str());
        // An unquoted dotted key (optim.lr = {...}) is valid TOML for a table "optim" holding "lr":
        // it read as a parameter "optim" of distribution ''.
        if (const toml::table* t = v.as_table(); t && !t->contains("type")) {
            std::string dotted(k.str());
            for (const toml::table* at = t; at && !at->empty() && !at->contains("type");) {
                const auto first = at->begin();  // (its pair lives in the iterator)
                dotted += "." + std::string(first->first.str());
                at = first->second.as_table();
            }
            if (dotted != k.str())
                return invalid_argument("{} [params] \"{}\": a table, not a distribution: quote a dotted key, \"{}\" = "
                                        "{{ type = ... }} (unquoted, TOML reads {} as nested tables)",
                                        source, k.str(), dotted, dotted);
        }
        STRATO_ASSIGN_OR_RETURN(Param p, parse_param(std::string(k.str()), v, fmt::format("{} [params] \"{}\"", source, k.str())));
        s.params.push_back(std::move(p));
    }
    for (const auto& p : s.params) {
        if (p.when_key.empty()) continue;
        if (p.when_key == p.key)
            return invalid_argument("{} [params] \"{}\": when refers to the parameter itself (it would never be sampled)",
                                    source, p.key);
        auto other = std::find_if(s.params.begin(), s.params.end(), [&](const Param& o) { return o.key == p.when_key; });
        if (other == s.params.end() || other->numeric())
            return invalid_argument("{} [params] \"{}\": when refers to '{}', which is not a choice or grid parameter",
                                    source, p.key, p.when_key);
        if (std::none_of(other->values.begin(), other->values.end(), [&](const std::string& v) {
                return unquoted(v) == unquoted(p.when_value);
            }))
            return invalid_argument("{} [params] \"{}\": when compares '{}' with {}, which is not one of its values "
                                    "(it would never be sampled)",
                                    source, p.key, p.when_key, p.when_value);
    }
    // Conditions in a loop (a when b, b when a) leave both unsampled.
    for (const auto& p : s.params) {
        const Param* at = &p;
        for (size_t hops = 0; at && !at->when_key.empty(); ++hops) {
            if (hops > s.params.size())
                return invalid_argument("{} [params] \"{}\": its when conditions go round in a loop", source, p.key);
            auto next = std::find_if(s.params.begin(), s.params.end(), [&](const Param& o) { return o.key == at->when_key; });
            at = next == s.params.end() ? nullptr : &*next;
        }
    }
    // A key given twice, by two `set` entries or by one and a parameter, was silently the last
    // one's (`set = ["optim.lr=0.1"]` beside a tuned "optim.lr": the set entry never applied).
    std::map<std::string, std::string> set_keys;
    for (const auto& entry : s.fixed) {
        std::string key = entry.substr(0, entry.find('='));
        key.erase(key.find_last_not_of(' ') + 1);
        key.erase(0, key.find_first_not_of(' '));
        if (auto [at, fresh] = set_keys.emplace(key, entry); !fresh)
            return invalid_argument("{}: set gives {} twice (\"{}\" and \"{}\"); the last would silently win: keep one",
                                    in_study, key, at->second, entry);
    }
    for (const auto& p : s.params)
        if (auto at = set_keys.find(p.key); at != set_keys.end())
            return invalid_argument("{} [params] \"{}\": [study] set also gives it (\"{}\"), which the tuned value would "
                                    "silently override: drop the set entry or the parameter",
                                    source, p.key, at->second);
    if (s.sampler == "grid" && std::none_of(s.params.begin(), s.params.end(), [](const Param& p) { return p.dist == Dist::kGrid; }))
        return invalid_argument("{}: sampler = \"grid\" needs at least one parameter of type grid", source);
    // A grid study without `trials` runs its grid once (Ray Tune's grid_search with num_samples 1;
    // Optuna's GridSampler stops when the grid is done): the default of 20 ran a 4-point grid five
    // times over, and only the first 20 points of a larger one.
    if (s.sampler == "grid" && !st->contains("trials"))
        s.trials = static_cast<int>(std::clamp<int64_t>(grid_size(s), 1, kGridTrialsMax));
    return s;
}

Result<StudyConfig> StudyConfig::load(const std::string& path) {
    STRATO_ASSIGN_OR_RETURN(std::string text, fs::read_file(path, fs::kTextFileLimit));
    return parse(text, path, std::filesystem::path(path).parent_path().string());
}

std::vector<int> StudyConfig::milestones(int bracket) const {
    std::vector<int> m;
    if (scheduler != "asha") return {max_t};
    int64_t first = grace;
    for (int b = 0; b < bracket && first < max_t; ++b) first *= reduction;
    for (int64_t r = first; r < max_t; r *= reduction) m.push_back(static_cast<int>(r));
    m.push_back(max_t);
    return m;
}

namespace {

// A literal as an integer setting takes it: "23", "-4" (not "23.8049", "1e+06").
bool whole_literal(const std::string& l) {
    const size_t sign = !l.empty() && l[0] == '-' ? 1 : 0;
    return l.size() > sign && std::all_of(l.begin() + static_cast<std::ptrdiff_t>(sign), l.end(),
                                          [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

// A value a draw can give inside a numeric parameter's range that is not a whole number, if
// there is one: uniform on [8, 32] drew 23.8049, which an integer setting refuses though both
// ends (8 and 32) were accepted. (An int, or a whole q from a whole low, draws whole numbers only.)
std::optional<std::string> fractional_value(const Param& p) {
    if (p.dist == Dist::kInt) return std::nullopt;
    for (double f : {0.41421356, 0.73205081, 0.5, 0.1, 0.9}) {
        std::string l = p.from_internal(p.internal_low() + f * (p.internal_high() - p.internal_low()));
        if (!whole_literal(l)) return l;
    }
    return std::nullopt;
}

}  // namespace

Status validate_against_train_config(const StudyConfig& s) {
    // What the executor sets for every trial (Executor::launch), and the study key that gives it:
    // max_t = 200000 passed here and then failed every trial on train.epochs.
    const std::pair<std::string, std::string> executor_sets[] = {
        {fmt::format("train.epochs={}", s.max_t), fmt::format("[scheduler] max_t = {}", s.max_t)},
        {fmt::format("train.stop_after_epochs={}", s.grace < s.max_t ? s.grace : 0),
         fmt::format("[scheduler] grace = {}", s.grace)},
        {fmt::format("run.threads={}", s.threads_per_trial),
         fmt::format("[study] threads_per_trial = {}", s.threads_per_trial)},
    };
    std::vector<std::string> common = s.fixed;
    for (const auto& [set, key] : executor_sets) common.push_back(set);
    // Every parameter at both ends of its range, at a fractional value inside it and at each of
    // its values (a choice of ["adamw", 3] or a high of 1e39 failed only in the trials that drew
    // it), the others at their low ends. (A parsed study has at least one parameter.)
    struct Probe {
        size_t param;
        std::string literal;
        bool inside = false;  // a value inside the range (its ends were probed before)
    };
    std::vector<std::string> lows;
    std::vector<Probe> probes;
    for (size_t i = 0; i < s.params.size(); ++i) {
        const Param& p = s.params[i];
        lows.push_back(p.from_internal(p.internal_low()));
        if (p.numeric()) {
            probes.push_back({i, lows.back()});
            probes.push_back({i, p.from_internal(p.internal_high())});
            if (auto inside = fractional_value(p)) probes.push_back({i, *inside, true});
        } else {
            for (const auto& v : p.values) probes.push_back({i, v});
        }
    }
    const auto load = [&](std::vector<std::string> sets) { return train::load_train_config(s.base, sets).status(); };
    // A failed probe is blamed on what fails without the parameters first: a `set` entry, then a
    // setting the executor adds; an unknown key on the parameter that has it, found by setting
    // each alone (only then: alone, a parameter may be invalid that is valid with another tuned
    // one, fp16 with run.device).
    const auto blame = [&](const Status& failed, const Probe& probe) -> Status {
        if (Status st = load(s.fixed); !st.is_ok()) return st.with_context(fmt::format("{} [study] set", s.source));
        for (const auto& [set, key] : executor_sets) {
            std::vector<std::string> sets = s.fixed;
            sets.push_back(set);
            if (Status st = load(sets); !st.is_ok())
                return st.with_context(fmt::format("{} {} (the tuner passes it to every trial)", s.source, key));
        }
        for (size_t i = 0; i < s.params.size(); ++i) {
            std::vector<std::string> sets = common;
            sets.push_back(s.params[i].key + "=" + lows[i]);
            Status alone = load(sets);
            if (!alone.is_ok() && alone.message().find("unknown key '" + s.params[i].key + "'") != std::string::npos)
                return alone.with_context(fmt::format("{}: parameter {}", s.source, s.params[i].key));
        }
        const Param& p = s.params[probe.param];
        if (probe.inside) {
            Status st = failed.with_context(fmt::format("{}: parameter {} = {} (a value drawn inside [{}, {}], whose "
                                                        "ends were accepted)",
                                                        s.source, p.key, probe.literal, lows[probe.param],
                                                        p.from_internal(p.internal_high())));
            if (failed.message().find("an integer") == std::string::npos) return st;
            return Status(st.code(), st.message() + fmt::format("\nhint: {} is an integer setting: use type = \"int\" "
                                                                "(with a whole-number q, if any){}",
                                                                p.key,
                                                                p.dist == Dist::kLogUniform
                                                                    ? ", or type = \"choice\" for log-spaced values"
                                                                    : ""));
        }
        return failed.with_context(fmt::format("{}: parameter {} = {}", s.source, p.key, probe.literal));
    };
    // The stopping variant judges a trial at a rung by its result at exactly that epoch: with
    // train.eval_every = 2 rungs at 1 and 3 epochs got no result, and no trial was ever stopped.
    // (The promotion variant's trials stop at their rung, an epoch the trainer always evaluates.)
    const bool stopping = s.scheduler == "asha" && s.variant == "stopping";
    std::set<int64_t> eval_every;
    for (const auto& probe : probes) {
        std::vector<std::string> sets = common;
        for (size_t i = 0; i < s.params.size(); ++i)
            sets.push_back(s.params[i].key + "=" + (i == probe.param ? probe.literal : lows[i]));
        auto tc = train::load_train_config(s.base, sets);
        if (!tc.is_ok()) return blame(tc.status(), probe);
        // train.max_steps ends a trial inside an epoch, whose evaluation the trainer writes at a
        // fractional epoch ("partial": true): the schedulers and the ranking count whole epochs
        // (max_t), so such a trial ended "completed" with no result. With batch sizes tuned, the
        // same step count is also a different number of samples per trial.
        if (tc->train.max_steps > 0)
            return invalid_argument(
                "{}: train.max_steps = {} (the base config's, a [study] set entry's or a parameter's) would end "
                "trials inside an epoch, but a study's budget is whole epochs ([scheduler] max_t = {})\nhint: "
                "limit trials with max_t (and data.limit_train for shorter epochs), or add \"train.max_steps=0\" "
                "to [study] set",
                s.source, tc->train.max_steps, s.max_t);
        if (stopping) eval_every.insert(tc->train.eval_every);
    }
    for (const int64_t every : eval_every) {
        for (int b = 0; b < s.brackets; ++b) {
            const std::vector<int> ms = s.milestones(b);
            std::string rungs;
            for (size_t k = 0; k + 1 < ms.size(); ++k) rungs += fmt::format("{}{}", rungs.empty() ? "" : ", ", ms[k]);
            for (size_t k = 0; k + 1 < ms.size(); ++k)
                if (ms[k] % every != 0)
                    return invalid_argument(
                        "{} [scheduler]: variant = \"stopping\" judges trials at rungs of {} epochs, "
                        "but train.eval_every = {} (the base config's, a [study] set entry's or a "
                        "parameter's) evaluates no epoch {}, so no trial would ever be stopped\n"
                        "hint: set train.eval_every = 1, or choose grace and reduction whose rungs "
                        "are multiples of it",
                        s.source, rungs, every, ms[k]);
        }
    }
    return Status::ok();
}

}  // namespace strato::tune
