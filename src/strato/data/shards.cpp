// Image-folder indexing, index.json validation, LocalStore and ShardSource. Packing is in
// shard_pack.cpp.

#include "strato/data/shards.h"

#include <fmt/ranges.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "strato/core/fs.h"
#include "strato/core/json_depth.h"
#include "strato/data/tar.h"

namespace strato::data {
namespace stdfs = std::filesystem;
namespace {

std::string os_error() { return std::strerror(errno); }

bool has_image_extension(const stdfs::path& p) {
    std::string ext = p.extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
    return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

bool is_sha256_hex(const std::string& s) {
    return s.size() == 64 &&
           std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

/// A shard name is a plain file name: no directories, nothing a remote store could escape with.
bool is_plain_file_name(const std::string& s) {
    return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
           s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

}  // namespace

// ---- image folders ---------------------------------------------------------------------------

std::vector<std::string> dataset_splits(const std::string& root) {
    std::error_code ec;
    auto dir = [&](const char* s) { return stdfs::is_directory(stdfs::path(root) / s, ec); };
    if (!dir("train")) return {""};
    if (!(dir("test") || dir("val"))) {
        // A root holding train/ and no other folder is a root of one split (found by review:
        // `strato data pack` packed it as one class named "train", every image labelled 0); beside
        // class folders, train/ is a class of the root's.
        for (const auto& e : stdfs::directory_iterator(root, ec)) {
            const std::string name = e.path().filename().string();
            if (name != "train" && !name.starts_with(".") && e.is_directory(ec)) return {""};
        }
    }
    std::vector<std::string> out;
    for (const char* s : {"train", "val", "test"})
        if (dir(s)) out.emplace_back(s);
    return out;
}

Result<std::string> class_folder(const std::string& name) {
    // A model's labels are text from its manifest: "../../x" read another tree as a class.
    if (name.empty() || name == "." || name == ".." || name.find('\0') != std::string::npos)
        return invalid_argument("class name '{}' cannot be a folder name", name);
    std::string folder = name;
    std::replace(folder.begin(), folder.end(), '/', '_');
    if (folder == "." || folder == "..") return invalid_argument("class name '{}' cannot be a folder name", name);
    return folder;
}

Result<std::vector<std::string>> class_folders(const std::vector<std::string>& names) {
    std::vector<std::string> folders;
    folders.reserve(names.size());
    for (size_t c = 0; c < names.size(); ++c) {
        STRATO_ASSIGN_OR_RETURN(std::string folder, class_folder(names[c]));
        if (auto same = std::find(folders.begin(), folders.end(), folder); same != folders.end())
            return invalid_argument("classes '{}' and '{}' would both be the folder '{}' ('/' is '_' in a folder)",
                                    names[static_cast<size_t>(same - folders.begin())], names[c], folder);
        folders.push_back(std::move(folder));
    }
    return folders;
}

std::vector<std::string> list_class_folders(const std::string& root, std::error_code& ec) {
    std::vector<std::string> found;
    for (const auto& e : stdfs::directory_iterator(root, ec))
        if (e.is_directory(ec) && !e.path().filename().string().starts_with('.')) found.push_back(e.path().filename().string());
    std::sort(found.begin(), found.end());
    return found;
}

Result<FolderIndex> index_image_folder(const std::string& root, const std::vector<std::string>& class_names) {
    std::error_code ec;
    if (!stdfs::is_directory(root, ec)) return not_found("image folder {} does not exist or is not a directory", root);
    FolderIndex idx;
    idx.root = root;
    // (a model naming a hidden class still finds its folder: class names given are looked up)
    const std::vector<std::string> found = list_class_folders(root, ec);
    if (ec) return io_error("cannot list {}: {}", root, ec.message());
    std::vector<std::string> folders;  // class c's images are under root/folders[c]
    if (class_names.empty()) {
        idx.class_names = found;
        folders = found;
    } else {
        idx.class_names = class_names;
        STRATO_ASSIGN_OR_RETURN(folders, class_folders(class_names));
        for (const auto& f : found) {
            if (std::find(folders.begin(), folders.end(), f) == folders.end()) {
                const size_t shown = std::min<size_t>(folders.size(), 20);
                return invalid_argument("{}: class folder '{}' is not one of the {} classes of the training split or "
                                        "model (folders {}{}; a '/' in a class name is '_' in its folder)",
                                        root, f, folders.size(),
                                        fmt::join(folders.begin(), folders.begin() + static_cast<long>(shown), ", "),
                                        shown < folders.size() ? ", ..." : "");
            }
        }
    }
    if (idx.class_names.empty()) {
        return invalid_argument("image folder {} has no class subfolders (expected {}/<class>/*.jpg|png)", root, root);
    }
    // Symbolic links to folders are followed (datasets are often assembled from links), but a
    // folder reached twice -- a link loop, or a link into another class -- would list its images
    // again, under the wrong class.
    std::map<std::pair<dev_t, ino_t>, std::string> seen_dirs;
    auto first_visit = [&](const stdfs::path& d) -> Status {
        struct stat st {};
        if (::stat(d.c_str(), &st) != 0) return io_error("cannot stat {}: {}", d.string(), os_error());
        auto [at, fresh] = seen_dirs.emplace(std::make_pair(st.st_dev, st.st_ino), d.string());
        if (fresh) {
            const stdfs::path rel = d.lexically_relative(root);
            if (rel.has_parent_path())  // below a class folder
                idx.dirs.emplace_back(rel.generic_string(), int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec);
            return Status::ok();
        }
        return invalid_argument(
            "image folder {}: {} is the folder {} again (a symbolic link loop, or a link into another class); its "
            "images would be listed twice, the second time under class '{}'",
            root, d.string(), at->second, d.lexically_relative(root).begin()->string());
    };
    for (size_t c = 0; c < idx.class_names.size(); ++c) {
        const stdfs::path dir = stdfs::path(root) / folders[c];
        if (!stdfs::is_directory(dir, ec)) continue;  // a split may miss a class
        STRATO_RETURN_IF_ERROR(first_visit(dir));
        std::vector<ImageFile> files;
        auto it = stdfs::recursive_directory_iterator(dir, stdfs::directory_options::follow_directory_symlink, ec);
        if (ec) return io_error("cannot list {}: {}", dir.string(), ec.message());
        for (; it != stdfs::recursive_directory_iterator(); it.increment(ec)) {
            if (ec) return io_error("cannot list {}: {}", dir.string(), ec.message());
            const auto& e = *it;
            if (e.is_directory(ec)) {
                STRATO_RETURN_IF_ERROR(first_visit(e.path()));
                continue;
            }
            if (!has_image_extension(e.path())) continue;
            if (!e.is_regular_file(ec)) {
                // An image name that leads nowhere (a moved file, a mount not there) was left out
                // without a word: the split shrank and the class counts changed silently.
                std::error_code lec;
                if (e.is_symlink(lec) && !stdfs::exists(e.path(), lec))
                    return not_found("image folder {}: {} is a symbolic link to {}, which does not exist (a moved file, or "
                                     "a file system not mounted?)",
                                     root, e.path().lexically_relative(root).generic_string(),
                                     stdfs::read_symlink(e.path(), lec).string());
                continue;
            }
            struct stat st {};
            if (::stat(e.path().c_str(), &st) != 0)
                return io_error("cannot stat {}: {}", e.path().string(), os_error());
            ImageFile f;
            f.path = e.path().lexically_relative(root).generic_string();  // as walked: relative() resolves links
            f.label = static_cast<int64_t>(c);
            f.bytes = st.st_size;
            f.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
            files.push_back(std::move(f));
        }
        if (ec) return io_error("cannot list {}: {}", dir.string(), ec.message());
        std::sort(files.begin(), files.end(), [](const ImageFile& a, const ImageFile& b) { return a.path < b.path; });
        for (auto& f : files) idx.files.push_back(std::move(f));
    }
    if (idx.files.empty())
        return invalid_argument("image folder {} has no .jpg/.jpeg/.png images in its class folders", root);
    return idx;
}

// ---- index.json ------------------------------------------------------------------------------

int64_t ShardIndex::shard_of(int64_t index) const {
    auto it = std::upper_bound(shard_starts.begin(), shard_starts.end(), index);
    return static_cast<int64_t>(it - shard_starts.begin()) - 1;
}

Result<ShardIndex> parse_shard_index(std::string_view text, const std::string& what) {
    using nlohmann::json;
    STRATO_ASSIGN_OR_RETURN(json j, parse_json_named(text, what, StatusCode::kDataLoss));
    auto bad = [&](const std::string& path, const std::string& expected) {
        return data_loss("{}: {}: expected {}", what, path, expected);
    };
    if (!j.is_object()) return bad("the document", "an object");
    if (!j.contains("format") || j["format"] != kShardIndexFormat)
        return bad("format", fmt::format("\"{}\"", kShardIndexFormat));
    if (!j.contains("version") || !j["version"].is_number_integer()) return bad("version", "an integer");
    if (j["version"].get<int64_t>() != kShardIndexVersion) {
        return data_loss("{}: version {} is not supported (this strato reads version {}); repack with this strato",
                         what, j["version"].get<int64_t>(), kShardIndexVersion);
    }
    ShardIndex idx;
    const json& classes = j.contains("classes") ? j["classes"] : json();
    if (!classes.is_array() || classes.empty()) return bad("classes", "a non-empty array of class names");
    for (size_t c = 0; c < classes.size(); ++c) {
        if (!classes[c].is_string()) return bad(fmt::format("classes[{}]", c), "a string");
        const std::string name = classes[c].get<std::string>();
        if (auto it = std::find(idx.class_names.begin(), idx.class_names.end(), name); it != idx.class_names.end())
            return bad(fmt::format("classes[{}]", c),
                       fmt::format("a name no other class has ('{}' is also classes[{}])", name, it - idx.class_names.begin()));
        idx.class_names.push_back(name);
    }
    const auto num_classes = static_cast<int64_t>(idx.class_names.size());
    if (!j.contains("samples") || !j["samples"].is_number_integer() || j["samples"].get<int64_t>() < 0) {
        return bad("samples", "an integer >= 0");
    }
    const json& shards = j.contains("shards") ? j["shards"] : json();
    if (!shards.is_array()) return bad("shards", "an array");
    auto integer = [](const json& v, int64_t lo, int64_t hi) {
        return v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
    };
    idx.shard_starts.push_back(0);
    std::unordered_map<std::string, size_t> names;
    for (size_t s = 0; s < shards.size(); ++s) {
        const json& sh = shards[s];
        const std::string at = fmt::format("shards[{}]", s);
        if (!sh.is_object()) return bad(at, "an object");
        ShardInfo info;
        if (!sh.contains("name") || !sh["name"].is_string() || !is_plain_file_name(sh["name"].get<std::string>())) {
            return bad(at + ".name", "a file name without directories");
        }
        info.name = sh["name"].get<std::string>();
        if (auto [it, fresh] = names.emplace(info.name, s); !fresh) {
            return bad(at + ".name",
                       fmt::format("a name no other shard has ('{}' is also shards[{}])", info.name, it->second));
        }
        if (!sh.contains("bytes") || !integer(sh["bytes"], kTarEndBytes, INT64_MAX)) {
            return bad(at + ".bytes", fmt::format("an integer >= {}", kTarEndBytes));
        }
        info.bytes = sh["bytes"].get<int64_t>();
        if (!sh.contains("sha256") || !sh["sha256"].is_string() || !is_sha256_hex(sh["sha256"].get<std::string>())) {
            return bad(at + ".sha256", "64 lowercase hex digits");
        }
        info.sha256 = sh["sha256"].get<std::string>();
        for (const char* k : {"keys", "offsets", "sizes", "labels"}) {
            if (!sh.contains(k) || !sh[k].is_array()) return bad(fmt::format("{}.{}", at, k), "an array");
        }
        const size_t n = sh["keys"].size();
        for (const char* k : {"offsets", "sizes", "labels"}) {
            if (sh[k].size() != n) {
                return bad(fmt::format("{}.{}", at, k),
                           fmt::format("{} entries, as many as {}.keys (got {})", n, at, sh[k].size()));
            }
        }
        if (sh.contains("samples") &&
            (!sh["samples"].is_number_integer() || sh["samples"].get<int64_t>() != static_cast<int64_t>(n))) {
            return bad(at + ".samples", fmt::format("{} (the length of {}.keys)", n, at));
        }
        for (size_t i = 0; i < n; ++i) {
            const json& key = sh["keys"][i];
            if (!key.is_string() || key.get<std::string>().empty())
                return bad(fmt::format("{}.keys[{}]", at, i), "a non-empty string");
            const json& off = sh["offsets"][i];
            if (!integer(off, 512, info.bytes) || off.get<int64_t>() % 512 != 0) {
                return bad(
                    fmt::format("{}.offsets[{}]", at, i),
                    fmt::format("a multiple of 512 in [512, {}] (the shard's bytes), got {}", info.bytes, off.dump()));
            }
            const json& size = sh["sizes"][i];
            if (!integer(size, 0, info.bytes - off.get<int64_t>())) {
                return bad(fmt::format("{}.sizes[{}]", at, i),
                           fmt::format("an integer in [0, {}] (to the end of the shard), got {}",
                                       info.bytes - off.get<int64_t>(), size.dump()));
            }
            const json& label = sh["labels"][i];
            if (!integer(label, 0, num_classes - 1)) {
                return bad(fmt::format("{}.labels[{}]", at, i),
                           fmt::format("a class index in [0, {}], got {}", num_classes - 1, label.dump()));
            }
            idx.keys.push_back(key.get<std::string>());
            idx.offsets.push_back(off.get<int64_t>());
            idx.sizes.push_back(size.get<int64_t>());
            idx.labels.push_back(label.get<int64_t>());
        }
        idx.shards.push_back(std::move(info));
        idx.shard_starts.push_back(idx.size());
    }
    if (j["samples"].get<int64_t>() != idx.size()) {
        return bad("samples",
                   fmt::format("{} (the samples listed in shards), got {}", idx.size(), j["samples"].get<int64_t>()));
    }
    return idx;
}

// ---- LocalStore ------------------------------------------------------------------------------

Result<std::string> LocalStore::read_meta(const std::string& name) const {
    std::error_code ec;
    if (!stdfs::is_directory(dir_, ec)) return not_found("shard directory {} does not exist", dir_);
    const stdfs::path p = stdfs::path(dir_) / name;
    if (!stdfs::exists(p, ec)) {
        return not_found("{} does not exist (not a shard directory? `strato data pack` writes it last)", p.string());
    }
    return fs::read_file(p);
}

Result<std::string> LocalStore::local_path(const ShardInfo& shard) {
    const std::string p = (stdfs::path(dir_) / shard.name).string();
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) {
        if (errno == ENOENT) return not_found("shard {} is missing (index.json lists it)", p);
        return io_error("cannot stat {}: {}", p, os_error());
    }
    if (st.st_size != shard.bytes) {
        return data_loss("shard {} is {} bytes, index.json says {} (truncated or replaced; repack or restore it)", p,
                         static_cast<int64_t>(st.st_size), shard.bytes);
    }
    return p;
}

// ---- ShardSource -----------------------------------------------------------------------------

namespace {
struct Fd {
    int fd = -1;
    explicit Fd(int f) : fd(f) {}
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
};
}  // namespace

struct ShardSource::Shard {
    std::mutex mu;
    std::shared_ptr<Fd> fd;  // readers hold a reference while they pread, so release never closes under them
};

Result<std::shared_ptr<ShardSource>> ShardSource::open(std::shared_ptr<ShardStore> store) {
    if (!store) return invalid_argument("ShardSource::open: no store");
    STRATO_ASSIGN_OR_RETURN(std::string text, store->read_meta(kShardIndexName));
    auto src = std::shared_ptr<ShardSource>(new ShardSource());
    STRATO_ASSIGN_OR_RETURN(src->index_, parse_shard_index(text, store->describe() + "/" + kShardIndexName));
    if (src->index_.size() == 0) return invalid_argument("{}/{} lists no samples", store->describe(), kShardIndexName);
    src->store_ = std::move(store);
    src->shards_ = std::make_unique<Shard[]>(src->index_.shards.size());
    return src;
}

ShardSource::~ShardSource() = default;

int64_t ShardSource::label(int64_t index) const {
    return index >= 0 && index < size() ? index_.labels[static_cast<size_t>(index)] : -1;
}

std::string ShardSource::name(int64_t index) const {
    if (index < 0 || index >= size()) return fmt::format("sample {} (out of range)", index);
    return fmt::format("{}:{}", index_.shards[static_cast<size_t>(index_.shard_of(index))].name,
                       index_.keys[static_cast<size_t>(index)]);
}

std::vector<int64_t> ShardSource::group_starts() const {
    return {index_.shard_starts.begin(), index_.shard_starts.end() - 1};
}

Status ShardSource::read(int64_t index, EncodedSample* out) const {
    if (index < 0 || index >= size()) return invalid_argument("sample index {} out of range [0, {})", index, size());
    const int64_t s = index_.shard_of(index);
    const ShardInfo& info = index_.shards[static_cast<size_t>(s)];
    std::shared_ptr<Fd> fd;
    {
        Shard& sh = shards_[s];
        std::lock_guard<std::mutex> lock(sh.mu);
        if (!sh.fd) {
            auto path = store_->local_path(info);
            if (!path.is_ok()) return path.status().with_context(name(index));
            int f = ::open(path->c_str(), O_RDONLY | O_CLOEXEC);
            if (f < 0) return io_error("{}: cannot open {}: {}", name(index), *path, os_error());
            sh.fd = std::make_shared<Fd>(f);
        }
        fd = sh.fd;
    }
    const auto i = static_cast<size_t>(index);
    const int64_t offset = index_.offsets[i], size = index_.sizes[i];
    out->bytes.resize(static_cast<size_t>(size));
    int64_t done = 0;
    while (done < size) {
        ssize_t r = ::pread(fd->fd, out->bytes.data() + done, static_cast<size_t>(size - done), offset + done);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return io_error("{}: cannot read {} bytes at offset {}: {}", name(index), size, offset, os_error());
        if (r == 0) {
            return data_loss(
                "{}: the shard ends at offset {}, index.json says the sample is {} bytes at offset {} "
                "(truncated shard?)",
                name(index), offset + done, size, offset);
        }
        done += r;
    }
    out->label = index_.labels[i];
    out->name = name(index);

    bool release = false;
    {
        std::lock_guard<std::mutex> lock(hint_mu_);
        if (!hint_sample_.empty() && hint_sample_[i] > 0) {
            --hint_sample_[i];
            release = --hint_shard_[static_cast<size_t>(s)] == 0;
        }
    }
    if (release) release_shard(s);
    return Status::ok();
}

void ShardSource::release_shard(int64_t shard) const {
    {
        Shard& sh = shards_[shard];
        std::lock_guard<std::mutex> lock(sh.mu);
        sh.fd.reset();
    }
    store_->release(index_.shards[static_cast<size_t>(shard)]);
}

void ShardSource::will_read(const std::vector<int64_t>& order, int64_t from) const {
    std::vector<ShardInfo> ahead;
    {
        std::lock_guard<std::mutex> lock(hint_mu_);
        hint_sample_.assign(static_cast<size_t>(size()), 0);
        hint_shard_.assign(index_.shards.size(), 0);
        std::vector<bool> seen(index_.shards.size(), false);
        for (size_t k = static_cast<size_t>(std::max<int64_t>(from, 0)); k < order.size(); ++k) {
            const int64_t i = order[k];
            if (i < 0 || i >= size()) continue;
            const auto s = static_cast<size_t>(index_.shard_of(i));
            ++hint_sample_[static_cast<size_t>(i)];
            ++hint_shard_[s];
            if (!seen[s]) {
                seen[s] = true;
                ahead.push_back(index_.shards[s]);
            }
        }
    }
    store_->prefetch(ahead);
}

}  // namespace strato::data
