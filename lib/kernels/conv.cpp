// Kernels of the windowed primitives. Convolutions: conv (y from x and the kernel),
// conv_input_grad (dx from dy and the kernel; also the transposed convolution) and
// conv_kernel_grad (dkernel from x and dy). Pooling: max_pool, avg_pool and their gradients
// (direct loops in both dtypes). f32 runs on oneDNN's convolution primitives (JIT kernels for the
// machine's instruction set, created once per geometry and cached); f64, and f32 where kiln is
// built without oneDNN, run the direct loops below. Geometry: kernels/conv.hpp; pooling attrs:
// ops/conv.cpp.

#include "kernels/conv.hpp"

#include <array>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "core/fail.hpp"
#include "kernels/parallel.hpp"

#if KILN_HAVE_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace kiln::detail {

ConvGeometry ConvGeometry::from(const Attrs& attrs) {
  const auto& v = attrs.ints;
  ConvGeometry g;
  g.spatial = static_cast<std::size_t>(v.at(0));
  g.channels_last = v.at(1) != 0;
  g.groups = v.at(2);
  const auto take = [&](std::size_t part) {
    const auto begin = v.begin() + 3 + static_cast<std::ptrdiff_t>(part * g.spatial);
    return std::vector<std::int64_t>(begin, begin + static_cast<std::ptrdiff_t>(g.spatial));
  };
  g.strides = take(0);
  g.dilations = take(1);
  g.pads_before = take(2);
  g.pads_after = take(3);
  return g;
}

void ConvGeometry::store(Attrs& attrs) const {
  auto& v = attrs.ints;
  v = {static_cast<std::int64_t>(spatial), channels_last ? 1 : 0, groups};
  for (const auto* part : {&strides, &dilations, &pads_before, &pads_after})
    v.insert(v.end(), part->begin(), part->end());
}

Shape ConvGeometry::activation_shape(std::int64_t n, std::int64_t c,
                                     const std::vector<std::int64_t>& extents) const {
  Shape s{n};
  if (!channels_last) s.push_back(c);
  for (auto e : extents) s.push_back(e);
  if (channels_last) s.push_back(c);
  return s;
}

namespace {

/// The sizes of one convolution, spatial axes padded to three (size 1, stride 1, no padding).
struct ConvSizes {
  std::int64_t n = 1, c = 1, o = 1, groups = 1;
  std::array<std::int64_t, 3> in{1, 1, 1}, out{1, 1, 1}, k{1, 1, 1}, stride{1, 1, 1},
      dilation{1, 1, 1}, before{0, 0, 0};
};

ConvSizes sizes_of(const ConvGeometry& g, const Shape& x, const Shape& w, const Shape& y) {
  ConvSizes s;
  s.n = g.batch(x);
  s.c = g.channels(x);
  s.o = g.channels(y);
  s.groups = g.groups;
  const std::size_t lead = 3 - g.spatial;
  for (std::size_t a = 0; a < g.spatial; ++a) {
    s.in[lead + a] = g.extent(x, a);
    s.out[lead + a] = g.extent(y, a);
    s.k[lead + a] = g.kernel_extent(w, a);
    s.stride[lead + a] = g.strides[a];
    s.dilation[lead + a] = g.dilations[a];
    s.before[lead + a] = g.pads_before[a];
  }
  return s;
}

/// Element strides of an activation [n, c, d, h, w] in either layout, and of the kernel
/// [o, i, kd, kh, kw] (i = channels per group).
struct Strides5 {
  std::array<std::int64_t, 5> v{};
};

Strides5 activation_strides(std::int64_t channels, bool channels_last,
                            const std::array<std::int64_t, 3>& extent) {
  Strides5 st;
  const std::int64_t spatial = extent[0] * extent[1] * extent[2];
  if (channels_last) {
    st.v = {spatial * channels, 1, extent[1] * extent[2] * channels, extent[2] * channels,
            channels};
  } else {
    st.v = {channels * spatial, spatial, extent[1] * extent[2], extent[2], 1};
  }
  return st;
}

Strides5 kernel_strides(const ConvSizes& s, bool channels_last) {
  const std::int64_t ci = s.c / s.groups, taps = s.k[0] * s.k[1] * s.k[2];
  Strides5 st;
  if (channels_last)  // [kd, kh, kw, i, o]
    st.v = {1, s.o, s.k[1] * s.k[2] * ci * s.o, s.k[2] * ci * s.o, ci * s.o};
  else  // [o, i, kd, kh, kw]
    st.v = {ci * taps, taps, s.k[1] * s.k[2], s.k[2], 1};
  return st;
}

/// Calls visit(x_offset, w_offset, y_offset) for every (input, kernel tap, output) triple that
/// a convolution multiplies, in one order for all three kernels.
template <class Visit>
void for_each_tap(const ConvSizes& s, bool channels_last, Visit visit) {
  const Strides5 xs = activation_strides(s.c, channels_last, s.in);
  const Strides5 ys = activation_strides(s.o, channels_last, s.out);
  const Strides5 ws = kernel_strides(s, channels_last);
  const std::int64_t ci = s.c / s.groups, co = s.o / s.groups;
  for (std::int64_t n = 0; n < s.n; ++n)
    for (std::int64_t grp = 0; grp < s.groups; ++grp)
      for (std::int64_t oc = grp * co; oc < (grp + 1) * co; ++oc)
        for (std::int64_t od = 0; od < s.out[0]; ++od)
          for (std::int64_t oh = 0; oh < s.out[1]; ++oh)
            for (std::int64_t ow = 0; ow < s.out[2]; ++ow) {
              const std::int64_t y_at =
                  n * ys.v[0] + oc * ys.v[1] + od * ys.v[2] + oh * ys.v[3] + ow * ys.v[4];
              for (std::int64_t kd = 0; kd < s.k[0]; ++kd) {
                const std::int64_t id = od * s.stride[0] - s.before[0] + kd * s.dilation[0];
                if (id < 0 || id >= s.in[0]) continue;
                for (std::int64_t kh = 0; kh < s.k[1]; ++kh) {
                  const std::int64_t ih = oh * s.stride[1] - s.before[1] + kh * s.dilation[1];
                  if (ih < 0 || ih >= s.in[1]) continue;
                  for (std::int64_t kw = 0; kw < s.k[2]; ++kw) {
                    const std::int64_t iw = ow * s.stride[2] - s.before[2] + kw * s.dilation[2];
                    if (iw < 0 || iw >= s.in[2]) continue;
                    const std::int64_t x_base =
                        n * xs.v[0] + id * xs.v[2] + ih * xs.v[3] + iw * xs.v[4];
                    const std::int64_t w_base =
                        oc * ws.v[0] + kd * ws.v[2] + kh * ws.v[3] + kw * ws.v[4];
                    for (std::int64_t i = 0; i < ci; ++i)
                      visit(x_base + (grp * ci + i) * xs.v[1], w_base + i * ws.v[1], y_at);
                  }
                }
              }
            }
}

template <class T>
void direct(Prim p, const ConvSizes& s, bool channels_last, const ArrayRef& a, const ArrayRef& b,
            const ArrayRef& out) {
  T* dst = out.ptr<T>();
  std::fill_n(dst, out.numel(), T{0});
  const T* u = a.ptr<const T>();
  const T* v = b.ptr<const T>();
  switch (p) {
    case Prim::conv:  // a = x, b = kernel
      for_each_tap(s, channels_last, [&](auto xi, auto wi, auto yi) { dst[yi] += u[xi] * v[wi]; });
      break;
    case Prim::conv_input_grad:  // a = dy, b = kernel
      for_each_tap(s, channels_last, [&](auto xi, auto wi, auto yi) { dst[xi] += u[yi] * v[wi]; });
      break;
    case Prim::conv_kernel_grad:  // a = x, b = dy
      for_each_tap(s, channels_last, [&](auto xi, auto wi, auto yi) { dst[wi] += u[xi] * v[yi]; });
      break;
    default:
      fail(name(p), "is not a convolution primitive");
  }
}

// ------------------------------------------------------------------------ pooling

/// A pooling's sizes: the geometry's, with the window as the kernel and C channels in and out.
ConvSizes pool_sizes(const ConvGeometry& g, const Attrs& attrs, const Shape& x, const Shape& y) {
  ConvSizes s;
  s.n = g.batch(x);
  s.c = s.o = g.channels(x);
  const std::size_t lead = 3 - g.spatial, window_at = 3 + 4 * g.spatial;
  for (std::size_t a = 0; a < g.spatial; ++a) {
    s.in[lead + a] = g.extent(x, a);
    s.out[lead + a] = g.extent(y, a);
    s.k[lead + a] = attrs.ints.at(window_at + a);
    s.stride[lead + a] = g.strides[a];
    s.dilation[lead + a] = g.dilations[a];
    s.before[lead + a] = g.pads_before[a];
  }
  return s;
}

/// One image's windows (for_each_window's body).
template <class Visit>
void for_each_window_of(const ConvSizes& s, const Strides5& xs, const Strides5& ys, std::int64_t n,
                        std::vector<std::int64_t>& taps, Visit& visit) {
  for (std::int64_t c = 0; c < s.c; ++c)
    for (std::int64_t od = 0; od < s.out[0]; ++od)
      for (std::int64_t oh = 0; oh < s.out[1]; ++oh)
        for (std::int64_t ow = 0; ow < s.out[2]; ++ow) {
          taps.clear();
          for (std::int64_t kd = 0; kd < s.k[0]; ++kd) {
            const std::int64_t id = od * s.stride[0] - s.before[0] + kd * s.dilation[0];
            if (id < 0 || id >= s.in[0]) continue;
            for (std::int64_t kh = 0; kh < s.k[1]; ++kh) {
              const std::int64_t ih = oh * s.stride[1] - s.before[1] + kh * s.dilation[1];
              if (ih < 0 || ih >= s.in[1]) continue;
              for (std::int64_t kw = 0; kw < s.k[2]; ++kw) {
                const std::int64_t iw = ow * s.stride[2] - s.before[2] + kw * s.dilation[2];
                if (iw < 0 || iw >= s.in[2]) continue;
                taps.push_back(n * xs.v[0] + c * xs.v[1] + id * xs.v[2] + ih * xs.v[3] +
                               iw * xs.v[4]);
              }
            }
          }
          visit(n * ys.v[0] + c * ys.v[1] + od * ys.v[2] + oh * ys.v[3] + ow * ys.v[4], taps);
        }
}

/// Calls visit(y_offset, x_offsets of the window's taps inside x) per output, the batch split
/// across the threads (each image's windows read and write only that image).
template <class Visit>
void for_each_window(const ConvSizes& s, bool channels_last, Visit visit) {
  const Strides5 xs = activation_strides(s.c, channels_last, s.in);
  const Strides5 ys = activation_strides(s.c, channels_last, s.out);
  const std::int64_t per_image = s.c * s.out[0] * s.out[1] * s.out[2] * s.k[0] * s.k[1] * s.k[2];
  auto images = [&](std::int64_t first, std::int64_t last) {
    std::vector<std::int64_t> taps;
    taps.reserve(static_cast<std::size_t>(s.k[0] * s.k[1] * s.k[2]));
    for (std::int64_t n = first; n < last; ++n) for_each_window_of(s, xs, ys, n, taps, visit);
  };
  parallel_for(s.n, std::max<std::int64_t>(1, (1 << 16) / std::max<std::int64_t>(per_image, 1)),
               images);
}

/// The tap of the window holding its maximum (the first NaN, else the first largest).
template <class T>
std::int64_t arg_max_tap(const T* x, const std::vector<std::int64_t>& taps) {
  std::int64_t best = taps.front();
  for (std::int64_t t : taps) {
    if (std::isnan(x[best])) break;
    if (std::isnan(x[t]) || x[t] > x[best]) best = t;
  }
  return best;
}

template <class T>
void pool_typed(Prim p, const ConvGeometry& g, const Attrs& attrs, const KernelCall& call) {
  const bool count_padding = attrs.ints.at(3 + 5 * g.spatial) != 0;
  const ArrayRef& first = call.inputs[0];
  const ArrayRef& out = call.out;
  T* dst = out.ptr<T>();
  switch (p) {
    case Prim::max_pool:
    case Prim::avg_pool: {
      const ConvSizes s = pool_sizes(g, attrs, first.shape, out.shape);
      const std::int64_t whole = s.k[0] * s.k[1] * s.k[2];
      const T* x = first.ptr<const T>();
      for_each_window(
          s, g.channels_last, [&](std::int64_t y, const std::vector<std::int64_t>& taps) {
            if (p == Prim::max_pool) {
              dst[y] = x[arg_max_tap(x, taps)];
              return;
            }
            T sum = 0;
            for (std::int64_t t : taps) sum += x[t];
            dst[y] = sum /
                     static_cast<T>(count_padding ? whole : static_cast<std::int64_t>(taps.size()));
          });
      break;
    }
    case Prim::max_pool_grad: {  // inputs x, dy
      const ConvSizes s = pool_sizes(g, attrs, first.shape, call.inputs[1].shape);
      const T* x = first.ptr<const T>();
      const T* dy = call.inputs[1].ptr<const T>();
      std::fill_n(dst, out.numel(), T{0});
      for_each_window(s, g.channels_last,
                      [&](std::int64_t y, const std::vector<std::int64_t>& taps) {
                        dst[arg_max_tap(x, taps)] += dy[y];
                      });
      break;
    }
    default: {  // avg_pool_grad: input dy, out shaped as x
      const ConvSizes s = pool_sizes(g, attrs, out.shape, first.shape);
      const std::int64_t whole = s.k[0] * s.k[1] * s.k[2];
      const T* dy = first.ptr<const T>();
      std::fill_n(dst, out.numel(), T{0});
      for_each_window(
          s, g.channels_last, [&](std::int64_t y, const std::vector<std::int64_t>& taps) {
            const T share =
                dy[y] /
                static_cast<T>(count_padding ? whole : static_cast<std::int64_t>(taps.size()));
            for (std::int64_t t : taps) dst[t] += share;
          });
      break;
    }
  }
}

#if KILN_HAVE_DNNL

using dnnl::memory;
using Tag = memory::format_tag;

/// OMP_NUM_THREADS when it is set to a positive integer, else no cap. Read once.
int openmp_thread_cap() {
  static const int cap = [] {
    const char* text = std::getenv("OMP_NUM_THREADS");
    const int value = text != nullptr ? std::atoi(text) : 0;
    return value > 0 ? value : std::numeric_limits<int>::max();
  }();
  return cap;
}

dnnl::engine& cpu_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

memory::dims dims_of(std::int64_t n, std::int64_t c, const std::array<std::int64_t, 3>& extent,
                     std::size_t spatial) {
  memory::dims d{n, c};
  for (std::size_t a = 3 - spatial; a < 3; ++a) d.push_back(extent[a]);
  return d;
}

Tag activation_tag(std::size_t spatial, bool channels_last) {
  static constexpr std::array<Tag, 3> last{Tag::nwc, Tag::nhwc, Tag::ndhwc};
  static constexpr std::array<Tag, 3> first{Tag::ncw, Tag::nchw, Tag::ncdhw};
  return (channels_last ? last : first)[spatial - 1];
}

Tag kernel_tag(std::size_t spatial, bool channels_last, bool grouped) {
  static constexpr std::array<Tag, 3> hwio{Tag::wio, Tag::hwio, Tag::dhwio};
  static constexpr std::array<Tag, 3> hwigo{Tag::wigo, Tag::hwigo, Tag::dhwigo};
  static constexpr std::array<Tag, 3> oihw{Tag::oiw, Tag::oihw, Tag::oidhw};
  static constexpr std::array<Tag, 3> goihw{Tag::goiw, Tag::goihw, Tag::goidhw};
  if (channels_last) return (grouped ? hwigo : hwio)[spatial - 1];
  return (grouped ? goihw : oihw)[spatial - 1];
}

/// oneDNN's primitives for one geometry: the forward pass (also the hint of the others) and the
/// one that was asked for.
struct DnnlConv {
  memory::desc x, w, y;                       // the user's layouts
  memory::desc x_chosen, w_chosen, y_chosen;  // the layouts of the primitive that runs
  dnnl::primitive run;
};

std::shared_ptr<const DnnlConv> dnnl_conv(Prim p, const ConvGeometry& g, const ConvSizes& s) {
  using Key = std::tuple<int, std::vector<std::int64_t>>;
  static std::mutex mutex;
  static std::map<Key, std::shared_ptr<const DnnlConv>> cache;
  std::vector<std::int64_t> id{s.n, s.c, s.o};
  Attrs attrs;
  g.store(attrs);
  id.insert(id.end(), attrs.ints.begin(), attrs.ints.end());
  for (const auto* part : {&s.in, &s.out, &s.k}) id.insert(id.end(), part->begin(), part->end());
  const Key key{static_cast<int>(p), id};
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  auto made = std::make_shared<DnnlConv>();
  const std::size_t sp = g.spatial;
  const bool grouped = g.groups > 1;
  made->x = memory::desc(dims_of(s.n, s.c, s.in, sp), memory::data_type::f32,
                         activation_tag(sp, g.channels_last));
  made->y = memory::desc(dims_of(s.n, s.o, s.out, sp), memory::data_type::f32,
                         activation_tag(sp, g.channels_last));
  memory::dims w_dims;
  if (grouped) w_dims.push_back(g.groups);
  w_dims.push_back(s.o / g.groups);
  w_dims.push_back(s.c / g.groups);
  for (std::size_t a = 3 - sp; a < 3; ++a) w_dims.push_back(s.k[a]);
  made->w = memory::desc(w_dims, memory::data_type::f32, kernel_tag(sp, g.channels_last, grouped));
  const memory::desc w_any(w_dims, memory::data_type::f32, Tag::any);
  // The kernel's layout is oneDNN's choice (a plain HWIO or OIHW kernel would push it to slower
  // code), and so are the activations' for channels first: oneDNN 2.6 has no direct kernels
  // for plain NCHW tensors of many channels and falls back to its GEMM-based convolution, where
  // a blocked layout and reorders around the call measure faster. Channels last it takes as is.
  const auto activation_any = [&](const memory::desc& user) {
    return g.channels_last ? user : memory::desc(user.dims(), memory::data_type::f32, Tag::any);
  };
  const memory::desc x_any = activation_any(made->x), y_any = activation_any(made->y);
  memory::dims strides, dilations, before, after;
  for (std::size_t a = 0; a < sp; ++a) {
    strides.push_back(g.strides[a]);
    dilations.push_back(g.dilations[a] - 1);  // oneDNN counts the gaps
    before.push_back(g.pads_before[a]);
    after.push_back(g.pads_after[a]);
  }
  // oneDNN wants the padding that reaches the last output position exactly.
  const auto algo = dnnl::algorithm::convolution_direct;
  const dnnl::convolution_forward::primitive_desc forward(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, algo, x_any, w_any, y_any,
                                      strides, dilations, before, after),
      cpu_engine());
  switch (p) {
    case Prim::conv:
      made->x_chosen = forward.src_desc();
      made->w_chosen = forward.weights_desc();
      made->y_chosen = forward.dst_desc();
      made->run = dnnl::convolution_forward(forward);
      break;
    case Prim::conv_input_grad: {
      const dnnl::convolution_backward_data::primitive_desc pd(
          dnnl::convolution_backward_data::desc(algo, x_any, w_any, y_any, strides, dilations,
                                                before, after),
          cpu_engine(), forward);
      made->x_chosen = pd.diff_src_desc();
      made->w_chosen = pd.weights_desc();
      made->y_chosen = pd.diff_dst_desc();
      made->run = dnnl::convolution_backward_data(pd);
      break;
    }
    default: {
      const dnnl::convolution_backward_weights::primitive_desc pd(
          dnnl::convolution_backward_weights::desc(algo, x_any, w_any, y_any, strides, dilations,
                                                   before, after),
          cpu_engine(), forward);
      made->x_chosen = pd.src_desc();
      made->w_chosen = pd.diff_weights_desc();
      made->y_chosen = pd.diff_dst_desc();
      made->run = dnnl::convolution_backward_weights(pd);
      break;
    }
  }
  const std::lock_guard<std::mutex> lock(mutex);
  return cache.emplace(key, std::move(made)).first->second;
}

void run_dnnl(Prim p, const ConvGeometry& g, const ConvSizes& s, const ArrayRef& a,
              const ArrayRef& b, const ArrayRef& out) {
  const std::shared_ptr<const DnnlConv> conv = dnnl_conv(p, g, s);
  // oneDNN's threads are OpenMP's, whose thread count is per calling thread (the matmul path
  // sets 1): kiln's thread count here, one inside a region kiln already runs in parallel, and
  // at most OMP_NUM_THREADS when that is set (the thread-sanitizer run sets 1: it cannot see
  // libgomp's synchronization).
  const int threads = inside_parallel_region ? 1 : std::min(num_threads(), openmp_thread_cap());
  if (omp_get_max_threads() != threads) omp_set_num_threads(threads);
  dnnl::engine& engine = cpu_engine();
  dnnl::stream stream(engine);
  // An input in the primitive's layout: the user's buffer, or a reordered copy of it.
  const auto input = [&](const memory::desc& user, const memory::desc& chosen, void* data) {
    memory given(user, engine, data);
    if (chosen == user) return given;
    memory copy(chosen, engine);
    dnnl::reorder(given, copy).execute(stream, given, copy);
    return copy;
  };
  // The output: the user's buffer, or one in the primitive's layout reordered into it after.
  struct Output {
    memory user, chosen;
  };
  const auto output = [&](const memory::desc& user, const memory::desc& chosen, void* data) {
    memory given(user, engine, data);
    return Output{given, chosen == user ? given : memory(chosen, engine)};
  };
  Output result;
  switch (p) {
    case Prim::conv:  // a = x, b = kernel
      result = output(conv->y, conv->y_chosen, out.data);
      conv->run.execute(stream, {{DNNL_ARG_SRC, input(conv->x, conv->x_chosen, a.data)},
                                 {DNNL_ARG_WEIGHTS, input(conv->w, conv->w_chosen, b.data)},
                                 {DNNL_ARG_DST, result.chosen}});
      break;
    case Prim::conv_input_grad:  // a = dy, b = kernel
      result = output(conv->x, conv->x_chosen, out.data);
      conv->run.execute(stream, {{DNNL_ARG_DIFF_DST, input(conv->y, conv->y_chosen, a.data)},
                                 {DNNL_ARG_WEIGHTS, input(conv->w, conv->w_chosen, b.data)},
                                 {DNNL_ARG_DIFF_SRC, result.chosen}});
      break;
    default:  // a = x, b = dy
      result = output(conv->w, conv->w_chosen, out.data);
      conv->run.execute(stream, {{DNNL_ARG_SRC, input(conv->x, conv->x_chosen, a.data)},
                                 {DNNL_ARG_DIFF_DST, input(conv->y, conv->y_chosen, b.data)},
                                 {DNNL_ARG_DIFF_WEIGHTS, result.chosen}});
      break;
  }
  if (result.chosen != result.user)
    dnnl::reorder(result.chosen, result.user).execute(stream, result.chosen, result.user);
  stream.wait();
}

#endif

}  // namespace

void run_window(const KernelCall& call) {
  const auto arity = static_cast<std::size_t>(info(call.prim).arity);
  if (call.inputs.size() != arity)
    fail(name(call.prim), "expects {} inputs, got {}", arity, call.inputs.size());
  if (call.prim == Prim::max_pool || call.prim == Prim::avg_pool ||
      call.prim == Prim::max_pool_grad || call.prim == Prim::avg_pool_grad) {
    const ConvGeometry g = ConvGeometry::from(call.attrs);
    if (call.out.numel() == 0) return;
    switch (call.out.dtype) {
      case DType::f64:
        pool_typed<double>(call.prim, g, call.attrs, call);
        return;
      case DType::f32:
        pool_typed<float>(call.prim, g, call.attrs, call);
        return;
      case DType::i32:  // max_pool only (avg_pool takes floats)
        pool_typed<std::int32_t>(call.prim, g, call.attrs, call);
        return;
      case DType::i64:
        pool_typed<std::int64_t>(call.prim, g, call.attrs, call);
        return;
      default:
        fail(name(call.prim), "has no {} kernel", dtype_name(call.out.dtype));
    }
  }
  const ConvGeometry g = ConvGeometry::from(call.attrs);
  const ArrayRef& a = call.inputs[0];
  const ArrayRef& b = call.inputs[1];
  // The shapes of x, the kernel and y, whichever of them are the inputs and the output.
  const Shape& x = call.prim == Prim::conv_input_grad ? call.out.shape : a.shape;
  const Shape& w = call.prim == Prim::conv_kernel_grad ? call.out.shape : b.shape;
  const Shape& y = call.prim == Prim::conv              ? call.out.shape
                   : call.prim == Prim::conv_input_grad ? a.shape
                                                        : b.shape;
  const ConvSizes s = sizes_of(g, x, w, y);
  if (call.out.numel() == 0) return;
  if (a.numel() == 0 || b.numel() == 0) {  // nothing to sum: zeros
    std::fill_n(static_cast<char*>(call.out.data),
                call.out.numel() * static_cast<std::int64_t>(dtype_size(call.out.dtype)), 0);
    return;
  }
  if (a.dtype == DType::f64) return direct<double>(call.prim, s, g.channels_last, a, b, call.out);
#if KILN_HAVE_DNNL
  run_dnnl(call.prim, g, s, a, b, call.out);
#else
  direct<float>(call.prim, s, g.channels_last, a, b, call.out);
#endif
}

}  // namespace kiln::detail
