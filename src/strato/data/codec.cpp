#include "strato/data/codec.h"

// jpeglib.h needs size_t and FILE declared first.
#include <cstdio>
#include <cstring>
#include <csetjmp>
#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include <algorithm>
#include <cmath>

namespace strato::data {
namespace {


Status check_size(const std::string& name, int64_t w, int64_t h) {
    if (w <= 0 || h <= 0 || w * h > kMaxImagePixels) {
        return invalid_argument("{}: image header says {}x{} pixels, outside 1 to {} megapixels (corrupt?)", name, w, h,
                                kMaxImagePixels >> 20);
    }
    return Status::ok();
}

bool is_png(std::string_view b) { return b.size() >= 8 && std::memcmp(b.data(), "\x89PNG\r\n\x1a\n", 8) == 0; }
bool is_jpeg(std::string_view b) {
    return b.size() >= 3 && static_cast<uint8_t>(b[0]) == 0xFF && static_cast<uint8_t>(b[1]) == 0xD8;
}

// --- EXIF orientation ----------------------------------------------------------------------

/// The orientation tag (0x0112) of IFD0 in an APP1 "Exif" payload; 1 when absent or unreadable.
int exif_orientation(const uint8_t* p, size_t n) {
    if (n < 14 || std::memcmp(p, "Exif\0\0", 6) != 0) return 1;
    p += 6;
    n -= 6;
    const bool le = p[0] == 'I' && p[1] == 'I';
    if (!le && !(p[0] == 'M' && p[1] == 'M')) return 1;
    auto u16 = [&](size_t o) -> uint32_t { return le ? p[o] | (p[o + 1] << 8) : (p[o] << 8) | p[o + 1]; };
    auto u32 = [&](size_t o) -> uint32_t { return le ? u16(o) | (u16(o + 2) << 16) : (u16(o) << 16) | u16(o + 2); };
    const size_t ifd = u32(4);
    if (ifd + 2 > n) return 1;
    const uint32_t count = u16(ifd);
    for (uint32_t i = 0; i < count; ++i) {
        const size_t e = ifd + 2 + size_t{12} * i;
        if (e + 12 > n) return 1;
        if (u16(e) == 0x0112 && u16(e + 2) == 3 /* SHORT */) {
            const uint32_t v = u16(e + 8);
            return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
        }
    }
    return 1;
}

bool transposed(int orientation) { return orientation >= 5; }

/// Maps an upright pixel (u, v) to its place in the stored image (w x h, as stored).
void upright_to_stored(int o, int64_t w, int64_t h, int64_t u, int64_t v, int64_t* x, int64_t* y) {
    switch (o) {
        case 2: *x = w - 1 - u, *y = v; break;
        case 3: *x = w - 1 - u, *y = h - 1 - v; break;
        case 4: *x = u, *y = h - 1 - v; break;
        case 5: *x = v, *y = u; break;
        case 6: *x = v, *y = h - 1 - u; break;
        case 7: *x = w - 1 - v, *y = h - 1 - u; break;
        case 8: *x = w - 1 - v, *y = u; break;
        default: *x = u, *y = v; break;
    }
}

// --- JPEG through libjpeg (setjmp error handling) ------------------------------------------

struct JpegError {
    jpeg_error_mgr mgr;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
    bool strict = false;  // DecodeRequest::strict
};

/// libjpeg-turbo's warnings (jerror.h) that mean the entropy-coded data is damaged: libjpeg
/// carries on and fills what it could not decode with grey. (Not "extraneous bytes before
/// marker": bytes after a whole scan, common in camera files, cost no pixel.)
bool corrupt_data_warning(int code) {
    switch (code) {
        case JWRN_HIT_MARKER:        // premature end of data segment (also a header larger than its scan)
        case JWRN_HUFF_BAD_CODE:     // bad Huffman code
        case JWRN_MUST_RESYNC:       // found marker instead of RSTn
        case JWRN_NOT_SEQUENTIAL:    // invalid SOS parameters for sequential JPEG
        case JWRN_BOGUS_PROGRESSION: // inconsistent progression sequence
#if JPEG_LIB_VERSION >= 70 || defined(D_ARITH_CODING_SUPPORTED)
        case JWRN_ARITH_BAD_CODE:    // bad arithmetic code
#endif
            return true;
        default:
            return false;
    }
}

void jpeg_error_exit(j_common_ptr c) {
    auto* e = reinterpret_cast<JpegError*>(c->err);
    (*c->err->format_message)(c, e->message);
    std::longjmp(e->jump, 1);
}

void jpeg_emit_message(j_common_ptr c, int level) {
    // Warnings (level -1) are ignored like every other reader does ("extraneous bytes before
    // marker"), except a premature end of data: the rest of the image would be grey. A strict
    // decode (`strato data verify --decode`) fails on every corrupt-data warning too.
    if (level != -1) return;
    const auto* e = reinterpret_cast<const JpegError*>(c->err);
    if (c->err->msg_code == JWRN_JPEG_EOF || (e->strict && corrupt_data_warning(c->err->msg_code)))
        jpeg_error_exit(c);
}

/// Everything a decode touches lives here, not in locals of the function that calls setjmp, so
/// a longjmp leaves no C++ object half-built and no local with an indeterminate value.
struct JpegJob {
    jpeg_decompress_struct cinfo{};
    JpegError err{};
    bool created = false;
    // in
    const uint8_t* data = nullptr;
    size_t size = 0;
    bool header_only = false;
    int out_channels = 3;
    bool fast = true;
    bool strict = false;  // corrupt-data warnings are errors, and the data is read to its end
    // region of the stored image (full-scale pixels), and the smallest size needed
    int64_t rx = 0, ry = 0, rw = 0, rh = 0, min_w = 0, min_h = 0;
    // out
    int64_t width = 0, height = 0, file_channels = 0;
    int orientation = 1;
    bool cmyk = false, adobe = false;
    unsigned scale_num = 8;
    std::vector<uint8_t> row;   // one decoded scanline (cropped width)
    Pixels stored;              // the region as stored, at the chosen scale
};

void read_header(JpegJob* job) {
    jpeg_decompress_struct& c = job->cinfo;
    jpeg_mem_src(&c, job->data, static_cast<unsigned long>(job->size));
    jpeg_save_markers(&c, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&c, TRUE);
    job->width = c.image_width;
    job->height = c.image_height;
    job->file_channels = c.num_components;
    job->cmyk = c.jpeg_color_space == JCS_CMYK || c.jpeg_color_space == JCS_YCCK;
    job->adobe = c.saw_Adobe_marker;
    for (jpeg_saved_marker_ptr m = c.marker_list; m; m = m->next) {
        // APP1 also carries XMP; the first one that is Exif counts.
        if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0) {
            job->orientation = exif_orientation(m->data, m->data_length);
            break;
        }
    }
}

/// Returns false on a libjpeg error (message in job->err.message).
bool run_jpeg(JpegJob* job) {
    jpeg_decompress_struct& c = job->cinfo;
    c.err = jpeg_std_error(&job->err.mgr);
    job->err.mgr.error_exit = jpeg_error_exit;
    job->err.mgr.emit_message = jpeg_emit_message;
    job->err.strict = job->strict;
    if (setjmp(job->err.jump)) return false;
    jpeg_create_decompress(&c);
    job->created = true;
    read_header(job);
    if (job->header_only) return true;
    if (static_cast<int64_t>(c.image_width) * c.image_height > kMaxImagePixels) return true;  // checked by the caller

    if (job->rw <= 0 || job->rh <= 0) job->rx = 0, job->ry = 0, job->rw = job->width, job->rh = job->height;
    // The smallest M/8 keeping the region at least min_w x min_h.
    unsigned m = 8;
    if (job->min_w > 0 || job->min_h > 0) {
        for (unsigned k = 1; k <= 8; ++k) {
            if ((job->rw * k + 7) / 8 >= job->min_w && (job->rh * k + 7) / 8 >= job->min_h) {
                m = k;
                break;
            }
        }
    }
    job->scale_num = m;
    c.scale_num = m;
    c.scale_denom = 8;
    c.out_color_space = job->cmyk ? JCS_CMYK : job->out_channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    c.dct_method = job->fast ? JDCT_IFAST : JDCT_ISLOW;
    c.do_fancy_upsampling = job->fast ? FALSE : TRUE;
    jpeg_start_decompress(&c);

    // The region at this scale, then clamped to the scaled image.
    const auto ow = static_cast<int64_t>(c.output_width), oh = static_cast<int64_t>(c.output_height);
    int64_t x0 = job->rx * m / 8, y0 = job->ry * m / 8;
    int64_t x1 = ((job->rx + job->rw) * m + 7) / 8, y1 = ((job->ry + job->rh) * m + 7) / 8;
    x0 = std::clamp<int64_t>(x0, 0, ow - 1), y0 = std::clamp<int64_t>(y0, 0, oh - 1);
    x1 = std::clamp<int64_t>(x1, x0 + 1, ow), y1 = std::clamp<int64_t>(y1, y0 + 1, oh);

    auto xoff = static_cast<JDIMENSION>(x0), cw = static_cast<JDIMENSION>(x1 - x0);
    if (x0 > 0 || x1 < ow) jpeg_crop_scanline(&c, &xoff, &cw);  // widened to iMCU boundaries
    const int comps = c.output_components;
    job->row.resize(static_cast<size_t>(c.output_width) * comps);
    Pixels& out = job->stored;
    out.width = x1 - x0;
    out.height = y1 - y0;
    out.channels = comps;
    out.data.resize(static_cast<size_t>(out.width * out.height * comps));
    if (y0 > 0) jpeg_skip_scanlines(&c, static_cast<JDIMENSION>(y0));
    const size_t skip = static_cast<size_t>(x0 - static_cast<int64_t>(xoff)) * comps;
    for (int64_t y = 0; y < out.height; ++y) {
        JSAMPROW r = job->row.data();
        if (jpeg_read_scanlines(&c, &r, 1) != 1) {
            std::snprintf(job->err.message, sizeof job->err.message, "no scanline %lld", static_cast<long long>(y0 + y));
            return false;
        }
        std::memcpy(out.row(y), job->row.data() + skip, static_cast<size_t>(out.width) * comps);
    }
    // Strict and the whole image read: the rest of the file up to EOI too (its warnings count).
    if (job->strict && c.output_scanline == c.output_height) jpeg_finish_decompress(&c);
    return true;
}

/// CMYK (Adobe files store it inverted) to RGB or gray.
void cmyk_to(Pixels& p, int channels, bool inverted) {
    Pixels o;
    o.width = p.width, o.height = p.height, o.channels = channels;
    o.data.resize(static_cast<size_t>(p.width * p.height * channels));
    const int64_t n = p.width * p.height;
    for (int64_t i = 0; i < n; ++i) {
        int c = p.data[i * 4], mm = p.data[i * 4 + 1], y = p.data[i * 4 + 2], k = p.data[i * 4 + 3];
        if (!inverted) c = 255 - c, mm = 255 - mm, y = 255 - y, k = 255 - k;
        const int r = c * k / 255, g = mm * k / 255, b = y * k / 255;
        if (channels == 3) {
            o.data[i * 3] = static_cast<uint8_t>(r), o.data[i * 3 + 1] = static_cast<uint8_t>(g),
                       o.data[i * 3 + 2] = static_cast<uint8_t>(b);
        } else {
            o.data[i] = static_cast<uint8_t>((r * 299 + g * 587 + b * 114 + 500) / 1000);
        }
    }
    p = std::move(o);
}

Result<Decoded> decode_jpeg(std::string_view bytes, const std::string& name, const DecodeRequest& req) {
    JpegJob job;
    job.data = reinterpret_cast<const uint8_t*>(bytes.data());
    job.size = bytes.size();
    job.out_channels = static_cast<int>(req.channels);
    job.fast = req.fast;
    // The header first: the region is given upright and must be mapped to the stored image.
    job.header_only = true;
    bool ok = run_jpeg(&job);
    if (job.created) jpeg_destroy_decompress(&job.cinfo);
    if (!ok) return invalid_argument("{}: not a readable JPEG ({})", name, job.err.message);
    STRATO_RETURN_IF_ERROR(check_size(name, job.width, job.height));
    const int o = job.orientation;
    const int64_t sw = job.width, sh = job.height;
    const int64_t uw = transposed(o) ? sh : sw, uh = transposed(o) ? sw : sh;  // upright size
    int64_t ux = req.x, uy = req.y, rw = req.w, rh = req.h;
    if (rw <= 0 || rh <= 0) ux = 0, uy = 0, rw = uw, rh = uh;
    if (ux < 0 || uy < 0 || ux + rw > uw || uy + rh > uh) {
        return invalid_argument("{}: region {}x{}+{}+{} is outside the {}x{} image", name, rw, rh, ux, uy, uw, uh);
    }
    // The stored rectangle holding the upright region: map two opposite corners.
    int64_t ax, ay, bx, by;
    upright_to_stored(o, sw, sh, ux, uy, &ax, &ay);
    upright_to_stored(o, sw, sh, ux + rw - 1, uy + rh - 1, &bx, &by);
    JpegJob full;
    full.data = job.data;
    full.size = job.size;
    full.out_channels = job.out_channels;
    full.fast = req.fast;
    full.strict = req.strict;
    full.rx = std::min(ax, bx), full.ry = std::min(ay, by);
    full.rw = std::abs(bx - ax) + 1, full.rh = std::abs(by - ay) + 1;
    full.min_w = transposed(o) ? req.min_h : req.min_w;
    full.min_h = transposed(o) ? req.min_w : req.min_h;
    ok = run_jpeg(&full);
    if (full.created) jpeg_destroy_decompress(&full.cinfo);
    if (!ok) return data_loss("{}: corrupt JPEG ({})", name, full.err.message);
    Decoded d;
    d.scale = full.scale_num / 8.0;
    if (full.cmyk) cmyk_to(full.stored, static_cast<int>(req.channels), full.adobe);
    if (o == 1) {
        d.pixels = std::move(full.stored);
        return d;
    }
    // Re-orient: the stored rectangle (at scale) becomes the upright region.
    const Pixels& s = full.stored;
    const int64_t c = s.channels;
    Pixels& u = d.pixels;
    u.channels = c;
    u.width = transposed(o) ? s.height : s.width;
    u.height = transposed(o) ? s.width : s.height;
    u.data.resize(s.data.size());
    for (int64_t v = 0; v < u.height; ++v) {
        for (int64_t x = 0; x < u.width; ++x) {
            int64_t px, py;
            upright_to_stored(o, s.width, s.height, x, v, &px, &py);
            std::memcpy(u.row(v) + x * c, s.row(py) + px * c, static_cast<size_t>(c));
        }
    }
    return d;
}

// --- PNG through libpng's simplified API -----------------------------------------------------

Result<Decoded> decode_png(std::string_view bytes, const std::string& name, const DecodeRequest& req) {
    png_image image;
    std::memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) {
        return invalid_argument("{}: not a readable PNG ({})", name, image.message);
    }
    if (Status st = check_size(name, image.width, image.height); !st.is_ok()) {
        png_image_free(&image);
        return st;
    }
    // Read with alpha and drop it afterwards, as Pillow's convert("RGB") does (libpng would
    // composite onto black); 16-bit data without colour-space chunks is sRGB, as Pillow takes it
    // (libpng would take it as linear and brighten it).
    const int64_t with_alpha = req.channels + 1;
    image.format = req.channels == 1 ? PNG_FORMAT_GA : PNG_FORMAT_RGBA;
    image.flags |= PNG_IMAGE_FLAG_16BIT_sRGB;
    std::vector<uint8_t> buf(PNG_IMAGE_SIZE(image));
    if (!png_image_finish_read(&image, nullptr, buf.data(), 0, nullptr)) {
        std::string msg = image.message;
        png_image_free(&image);
        return data_loss("{}: corrupt PNG ({})", name, msg);
    }
    Pixels full;
    full.width = image.width, full.height = image.height, full.channels = req.channels;
    full.data.resize(static_cast<size_t>(full.width * full.height * full.channels));
    for (int64_t i = 0, n = full.width * full.height; i < n; ++i)
        for (int64_t k = 0; k < req.channels; ++k) full.data[static_cast<size_t>(i * req.channels + k)] = buf[static_cast<size_t>(i * with_alpha + k)];
    Decoded d;
    if (req.w <= 0 || req.h <= 0) {
        d.pixels = std::move(full);
        return d;
    }
    if (req.x < 0 || req.y < 0 || req.x + req.w > full.width || req.y + req.h > full.height) {
        return invalid_argument("{}: region {}x{}+{}+{} is outside the {}x{} image", name, req.w, req.h, req.x, req.y,
                                full.width, full.height);
    }
    Pixels& p = d.pixels;
    p.width = req.w, p.height = req.h, p.channels = full.channels;
    p.data.resize(static_cast<size_t>(p.width * p.height * p.channels));
    for (int64_t y = 0; y < p.height; ++y)
        std::memcpy(p.row(y), full.row(req.y + y) + req.x * p.channels, static_cast<size_t>(p.width * p.channels));
    return d;
}

}  // namespace

Result<ImageInfo> probe_image(std::string_view bytes, const std::string& name) {
    if (bytes.empty()) return invalid_argument("{}: empty file (0 bytes; expected a JPEG or PNG image)", name);
    ImageInfo info;
    if (is_png(bytes)) {
        png_image image;
        std::memset(&image, 0, sizeof image);
        image.version = PNG_IMAGE_VERSION;
        if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()))
            return invalid_argument("{}: not a readable PNG ({})", name, image.message);
        info.format = ImageFormat::kPng;
        info.width = image.width, info.height = image.height;
        info.channels = PNG_IMAGE_PIXEL_CHANNELS(image.format);
        png_image_free(&image);
        STRATO_RETURN_IF_ERROR(check_size(name, info.width, info.height));
        return info;
    }
    if (!is_jpeg(bytes)) return invalid_argument("{}: unknown image format (expected JPEG or PNG)", name);
    JpegJob job;
    job.data = reinterpret_cast<const uint8_t*>(bytes.data());
    job.size = bytes.size();
    job.header_only = true;
    const bool ok = run_jpeg(&job);
    if (job.created) jpeg_destroy_decompress(&job.cinfo);
    if (!ok) return invalid_argument("{}: not a readable JPEG ({})", name, job.err.message);
    info.format = ImageFormat::kJpeg;
    info.orientation = job.orientation;
    info.width = transposed(job.orientation) ? job.height : job.width;
    info.height = transposed(job.orientation) ? job.width : job.height;
    info.channels = job.file_channels;
    STRATO_RETURN_IF_ERROR(check_size(name, info.width, info.height));
    return info;
}

Result<Decoded> decode_image(std::string_view bytes, const std::string& name, const DecodeRequest& request) {
    if (request.channels != 1 && request.channels != 3)
        return invalid_argument("{}: channels must be 1 or 3, got {}", name, request.channels);
    if (is_png(bytes)) return decode_png(bytes, name, request);
    if (is_jpeg(bytes)) return decode_jpeg(bytes, name, request);
    if (bytes.empty()) return invalid_argument("{}: empty file (expected a JPEG or PNG image)", name);
    return invalid_argument("{}: unknown image format (expected JPEG or PNG)", name);
}

namespace {

/// True when a JPEG's marker segments lead to an end-of-image marker (EOI) before the bytes end.
/// Segments are skipped by their length (an EXIF thumbnail's EOI inside APP1 does not count), and
/// entropy-coded data up to the next marker that is not a stuffed 0xFF00 or a restart marker.
bool jpeg_has_end(std::string_view b) {
    const auto* p = reinterpret_cast<const uint8_t*>(b.data());
    const size_t n = b.size();
    size_t i = 2;  // after SOI
    for (;;) {
        while (i < n && p[i] != 0xFF) ++i;  // bytes before a marker: libjpeg skips them too
        while (i < n && p[i] == 0xFF) ++i;  // fill bytes
        if (i >= n) return false;
        const uint8_t m = p[i++];
        if (m == 0xD9) return true;
        if (m == 0x00 || m == 0x01 || (m >= 0xD0 && m <= 0xD8)) continue;  // no length
        if (i + 2 > n) return false;
        const size_t len = (size_t{p[i]} << 8) | p[i + 1];
        if (len < 2 || i + len > n) return false;
        i += len;
        if (m != 0xDA) continue;
        // Entropy-coded data: to the next 0xFF that is neither stuffing (FF00) nor a restart.
        for (;;) {
            const void* ff = std::memchr(p + i, 0xFF, n - i);
            if (!ff) return false;
            i = static_cast<size_t>(static_cast<const uint8_t*>(ff) - p);
            if (i + 1 >= n) return false;
            const uint8_t next = p[i + 1];
            if (next == 0x00 || (next >= 0xD0 && next <= 0xD7)) {
                i += 2;
                continue;
            }
            break;  // a marker: the outer loop reads it
        }
    }
}

/// True when a PNG's chunks lead to IEND before the bytes end.
bool png_has_end(std::string_view b) {
    const auto* p = reinterpret_cast<const uint8_t*>(b.data());
    const uint64_t n = b.size();
    uint64_t i = 8;  // after the signature
    while (i + 8 <= n) {
        const uint64_t len = (uint64_t{p[i]} << 24) | (uint64_t{p[i + 1]} << 16) | (uint64_t{p[i + 2]} << 8) | p[i + 3];
        if (std::memcmp(p + i + 4, "IEND", 4) == 0) return true;
        i += 12 + len;  // length, type, data, CRC
    }
    return false;
}

}  // namespace

Status check_image_whole(std::string_view bytes, const std::string& name) {
    if (bytes.empty()) return data_loss("{}: empty file (0 bytes; expected a JPEG or PNG image)", name);
    STRATO_ASSIGN_OR_RETURN(const ImageInfo info, probe_image(bytes, name));
    return check_image_whole(bytes, name, info);
}

Status check_image_whole(std::string_view bytes, const std::string& name, const ImageInfo& info) {
    const bool png = info.format == ImageFormat::kPng;
    if (png ? png_has_end(bytes) : jpeg_has_end(bytes)) return Status::ok();
    // No end marker: a cut-off file, unless the image data is all there (a writer that left out
    // the marker): then training reads it as well as any other.
    DecodeRequest whole;
    whole.channels = info.channels == 1 ? 1 : 3;
    whole.min_w = whole.min_h = 1;  // a JPEG at 1/8 scale: every coefficient is still read
    auto decoded = decode_image(bytes, name, whole);
    if (decoded.is_ok()) return Status::ok();
    std::string why = decoded.status().message();
    if (why.compare(0, name.size() + 2, name + ": ") == 0) why.erase(0, name.size() + 2);
    return data_loss("{}: truncated {} ({} bytes, no {}; expected a whole image file): {}", name, png ? "PNG" : "JPEG",
                     bytes.size(), png ? "IEND chunk" : "end-of-image marker FF D9", why);
}

}  // namespace strato::data
