#include "strato/data/image_folder.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "strato/core/fs.h"
#include "strato/core/log.h"
#include "strato/data/codec.h"
#include "strato/data/shards.h"

namespace strato::data {
namespace stdfs = std::filesystem;
namespace {

int64_t mtime_ns(const stdfs::path& p) {
    struct stat st {};
    if (::stat(p.c_str(), &st) != 0) return -1;
    return static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

stdfs::path index_cache_path(const std::string& root) {
    const std::string base = cache_root();
    if (base.empty()) return {};
    return stdfs::path(base) / "image-index" / (fs::sha256_hex(root).substr(0, 32) + ".txt");
}

/// The cached index: a header, the classes with their folder's mtime, the files; the last line
/// is the SHA-256 of everything before it. Any mismatch means "list the folder again".
struct IndexFile {
    std::vector<std::pair<int64_t, std::string>> classes;  // mtime, name
    std::vector<std::pair<int64_t, std::string>> files;    // label, relative path
    std::vector<std::pair<int64_t, std::string>> dirs;     // mtime, folders below the classes holding files
};

std::string render(const std::string& root, int64_t root_mtime, const IndexFile& f) {
    std::string s = "strato-image-index 1\n";
    s += fmt::format("root {} {}\n", root_mtime, root);
    for (const auto& [m, n] : f.classes) s += fmt::format("class {} {}\n", m, n);
    for (const auto& [m, d] : f.dirs) s += fmt::format("dir {} {}\n", m, d);
    for (const auto& [l, p] : f.files) s += fmt::format("file {} {}\n", l, p);
    return s + "sha256 " + fs::sha256_hex(s) + "\n";
}

bool parse_index(const std::string& text, const std::string& root, int64_t root_mtime, IndexFile* out) {
    const size_t last = text.rfind("sha256 ");
    if (last == std::string::npos || text.substr(last + 7, 64) != fs::sha256_hex(text.substr(0, last))) return false;
    std::istringstream in(text.substr(0, last));
    std::string line, tag;
    if (!std::getline(in, line) || line != "strato-image-index 1") return false;
    while (std::getline(in, line)) {
        std::istringstream ls(line);
        int64_t num = 0;
        ls >> tag >> num;
        std::string rest;
        std::getline(ls, rest);
        if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
        if (tag == "root") {
            if (num != root_mtime || rest != root) return false;
        } else if (tag == "class") {
            out->classes.emplace_back(num, rest);
        } else if (tag == "dir") {
            out->dirs.emplace_back(num, rest);
        } else if (tag == "file") {
            if (num < 0 || num >= static_cast<int64_t>(out->classes.size())) return false;
            out->files.emplace_back(num, rest);
        } else {
            return false;
        }
    }
    return true;
}

}  // namespace

Result<std::shared_ptr<ImageFolderSource>> ImageFolderSource::open(const std::string& root_in,
                                                                   std::vector<std::string> class_names) {
    std::error_code ec;
    if (!stdfs::is_directory(root_in, ec)) return not_found("image folder {} does not exist or is not a directory", root_in);
    const std::string root = stdfs::absolute(root_in, ec).lexically_normal().string();
    if (class_names.empty()) class_names = list_class_folders(root, ec);
    if (class_names.empty()) return invalid_argument("image folder {} has no class subfolders (expected {}/<class>/*.jpg)", root, root);
    auto src = std::shared_ptr<ImageFolderSource>(new ImageFolderSource());
    src->root_ = root;
    src->class_names_ = class_names;

    // The cached index is valid while the root's and every class folder's mtime are unchanged
    // (adding, removing or renaming a file changes its folder's mtime).
    const int64_t root_mtime = mtime_ns(root);
    // A class's folder: "T-shirt/top" is T-shirt_top/.
    STRATO_ASSIGN_OR_RETURN(const std::vector<std::string> folders, class_folders(class_names));
    const stdfs::path cache = index_cache_path(root);
    IndexFile index;
    bool cached = false;
    if (!cache.empty()) {
        if (auto text = fs::read_file(cache); text.is_ok() && parse_index(*text, root, root_mtime, &index)) {
            cached = index.classes.size() == class_names.size();
            for (size_t c = 0; cached && c < class_names.size(); ++c)
                cached = index.classes[c].second == class_names[c] &&
                         index.classes[c].first == mtime_ns(stdfs::path(root) / folders[c]);
            for (size_t d = 0; cached && d < index.dirs.size(); ++d)
                cached = index.dirs[d].first == mtime_ns(stdfs::path(root) / index.dirs[d].second);
        }
    }
    if (!cached) {
        // The listing itself is the packer's (shards.h), so both see the same files. Folder
        // mtimes are read before it: a file added meanwhile makes the next open list again.
        index = {};
        for (size_t c = 0; c < class_names.size(); ++c)
            index.classes.emplace_back(mtime_ns(stdfs::path(root) / folders[c]), class_names[c]);
        STRATO_ASSIGN_OR_RETURN(FolderIndex listed, index_image_folder(root, class_names));
        bool cacheable = true;
        for (auto& f : listed.files) {
            if (f.path.find('\n') != std::string::npos) cacheable = false;
            index.files.emplace_back(f.label, std::move(f.path));
        }
        // Every folder below the classes, empty ones too (an image copied into an empty nested
        // folder changes only that folder's mtime), with the mtime read before it was listed.
        for (auto& [d, mtime] : listed.dirs) {
            if (d.find('\n') != std::string::npos) cacheable = false;
            index.dirs.emplace_back(mtime, std::move(d));
        }
        if (!cache.empty() && cacheable) {
            Status st = fs::ensure_dir(cache.parent_path());
            if (st.is_ok()) st = fs::atomic_write(cache, render(root, root_mtime, index));
            if (!st.is_ok()) log::debug("image folder index not cached: {}", st.message());
        }
    }
    src->from_cache_ = cached;
    std::vector<int64_t> counts(class_names.size(), 0);
    for (auto& [label, file] : index.files) {
        src->files_.push_back(std::move(file));
        src->labels_.push_back(label);
        ++counts[static_cast<size_t>(label)];
    }
    for (size_t c = 0; c < counts.size(); ++c)
        if (counts[c] == 0) src->empty_classes_.push_back(class_names[c]);
    if (src->files_.empty())
        return invalid_argument("image folder {} has no .jpg/.jpeg/.png images in its {} class folders", root, class_names.size());
    return src;
}

std::string ImageFolderSource::name(int64_t index) const {
    return (stdfs::path(root_) / files_[static_cast<size_t>(index)]).string();
}

Status ImageFolderSource::read(int64_t index, EncodedSample* out) const {
    if (index < 0 || index >= size()) return invalid_argument("sample index {} out of range [0, {})", index, size());
    out->name = name(index);
    STRATO_ASSIGN_OR_RETURN(out->bytes, fs::read_file(out->name, kMaxImageFileBytes));
    out->label = labels_[static_cast<size_t>(index)];
    return Status::ok();
}

Result<std::shared_ptr<ImageDataset>> ImageDataset::create(std::shared_ptr<const SampleSource> source,
                                                           ImageDatasetOptions options) {
    if (!source) return invalid_argument("image dataset: no source");
    if (options.cache != "none" && options.cache != "encoded" && options.cache != "decoded")
        return invalid_argument("data.cache: expected none, encoded or decoded, got '{}'", options.cache);
    auto ds = std::shared_ptr<ImageDataset>(new ImageDataset());
    STRATO_ASSIGN_OR_RETURN(ds->pipeline_, Pipeline::parse(options.transforms, options.shape, options.where));
    ds->pipeline_->set_fast_decode(options.fast_decode);
    ds->pipeline_->set_full_decode(options.cache == "decoded");
    ds->source_ = std::move(source);
    ds->opts_ = std::move(options);
    return ds;
}

Status ImageDataset::load_random(int64_t index, uint64_t seed, uint8_t* dst, int64_t* label) const {
    if (index < 0 || index >= size()) return invalid_argument("sample index {} out of range [0, {})", index, size());
    const int64_t cap = opts_.cache_mb << 20;
    if (opts_.cache == "decoded") {
        std::shared_ptr<const Pixels> px;
        {
            std::lock_guard lock(mu_);
            if (auto it = decoded_.find(index); it != decoded_.end()) px = it->second, ++cache_.hits;
            else ++cache_.misses;
        }
        if (!px) {
            EncodedSample s;
            STRATO_RETURN_IF_ERROR(source_->read(index, &s));
            DecodeRequest req;
            req.channels = pipeline_->output().channels;
            req.fast = opts_.fast_decode;
            STRATO_ASSIGN_OR_RETURN(Decoded d, decode_image(s.bytes, s.name, req));
            px = std::make_shared<const Pixels>(std::move(d.pixels));
            std::lock_guard lock(mu_);
            const auto bytes = static_cast<int64_t>(px->data.size());
            if (cache_.bytes + bytes <= cap && decoded_.emplace(index, px).second) cache_.bytes += bytes, ++cache_.entries;
        }
        *label = source_->label(index);
        return pipeline_->run(*px, seed, dst);
    }
    std::shared_ptr<const std::string> bytes;
    std::string name;
    if (opts_.cache == "encoded") {
        std::lock_guard lock(mu_);
        if (auto it = encoded_.find(index); it != encoded_.end()) bytes = it->second, ++cache_.hits;
        else ++cache_.misses;
    }
    if (!bytes) {
        EncodedSample s;
        STRATO_RETURN_IF_ERROR(source_->read(index, &s));
        name = std::move(s.name);
        auto b = std::make_shared<const std::string>(std::move(s.bytes));
        if (opts_.cache == "encoded") {
            std::lock_guard lock(mu_);
            const auto n = static_cast<int64_t>(b->size());
            if (cache_.bytes + n <= cap && encoded_.emplace(index, b).second) cache_.bytes += n, ++cache_.entries;
        }
        bytes = std::move(b);
    } else {
        name = source_->name(index);
    }
    *label = source_->label(index);
    return pipeline_->run(*bytes, name, seed, dst);
}

ImageDataset::CacheStats ImageDataset::cache_stats() const {
    std::lock_guard lock(mu_);
    return cache_;
}

Result<std::shared_ptr<ImageDataset>> open_image_folder(const std::string& root, ImageDatasetOptions options,
                                                        std::vector<std::string> class_names) {
    STRATO_ASSIGN_OR_RETURN(auto source, ImageFolderSource::open(root, std::move(class_names)));
    for (const auto& c : source->empty_classes()) log::warn("image folder {}: class '{}' has no images", root, c);
    return ImageDataset::create(std::move(source), std::move(options));
}

}  // namespace strato::data
