// PNG encoding of summary images, through libpng.
#include <png.h>

#include <csetjmp>
#include <string>

#include "core/fail.hpp"
#include "summary/events.hpp"

namespace kiln::detail::summary {

namespace {

struct PngOutput {
  std::string bytes;
  char message[256] = {};
};

void append_bytes(png_structp png, png_bytep data, png_size_t size) {
  auto* out = static_cast<PngOutput*>(png_get_io_ptr(png));
  out->bytes.append(reinterpret_cast<const char*>(data), size);
}

void no_flush(png_structp) {}

// libpng reports errors by longjmp back to png_encode's setjmp; the message is kept for the
// kiln::Error raised there.
[[noreturn]] void on_error(png_structp png, png_const_charp message) {
  auto* out = static_cast<PngOutput*>(png_get_error_ptr(png));
  std::snprintf(out->message, sizeof out->message, "%s", message);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

int color_type(int channels) {
  switch (channels) {
    case 1:
      return PNG_COLOR_TYPE_GRAY;
    case 2:
      return PNG_COLOR_TYPE_GRAY_ALPHA;
    case 3:
      return PNG_COLOR_TYPE_RGB;
    default:
      return PNG_COLOR_TYPE_RGBA;
  }
}

// Only trivially destructible locals live in this function, so the longjmp skips no
// destructor. Returns false on a libpng error (its message in out.message).
bool png_encode(PngOutput& out, png_bytep* rows, int height, int width, int channels) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &out, on_error, on_warning);
  if (png == nullptr) return false;
  png_infop info = png_create_info_struct(png);
  if (info == nullptr || setjmp(png_jmpbuf(png)) != 0) {
    png_destroy_write_struct(&png, info != nullptr ? &info : nullptr);
    return false;
  }
  png_set_write_fn(png, &out, append_bytes, no_flush);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               color_type(channels), PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

}  // namespace

std::string encode_png(std::span<const std::uint8_t> pixels, int height, int width, int channels) {
  std::vector<png_bytep> rows(static_cast<std::size_t>(height));
  const auto stride = static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  for (std::size_t r = 0; r < rows.size(); ++r)
    rows[r] = const_cast<png_bytep>(pixels.data() + r * stride);
  PngOutput out;
  if (!png_encode(out, rows.data(), height, width, channels))
    fail("summary.image", "PNG encoding failed: {}",
         out.message[0] != 0 ? out.message : "libpng could not allocate its state");
  return std::move(out.bytes);
}

}  // namespace kiln::detail::summary
