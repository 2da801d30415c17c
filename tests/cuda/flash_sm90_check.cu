// flash_sm90_check.cu — the sm_90a FlashAttention kernels (mini/tensor/cuda/sm90/flash_sm90.cuh)
// on their own, without the rest of mini: every tile shape against a float32 reference computed
// on the device (forward: out and lse; backward: dq, dk, dv), on contiguous heads and on a GPT's
// transposed ones ([B, L, H, D] memory), causal and not, with lengths that are not multiples of
// a tile; then the TFLOP/s of each tile shape at GPT-2's shape. Exits 1 on a wrong result.
//
//   nvcc -std=c++17 -O3 --expt-relaxed-constexpr -gencode=arch=compute_90a,code=sm_90a -I mini \
//        tests/cuda/flash_sm90_check.cu -o build-gpu/flash_sm90_check && build-gpu/flash_sm90_check
// (scripts/gpu_flash_sm90.sh runs it on the GPU machine, torch's SDPA timed beside it).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "tensor/cuda/sm90/flash_sm90.cuh"

using mini::cuda::flash::Rows;
using bf16 = __nv_bfloat16;
namespace fl = mini::cuda::flash;
namespace sm90 = mini::cuda::flash::sm90;

#define CHECK(call)                                                                     \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                     \
    }                                                                                   \
  } while (0)

// ---- the float32 reference (a thread a row or a key; the probabilities from the saved lse) ----
struct Ref {
  const bf16 *q, *k, *v, *dout;
  Rows qr, kr, vr, dor;
  int64_t bh;
  int L, S, D;
  bool causal;
  float scale;
};

__device__ float dot_rows(const bf16* a, const bf16* b, int D) {
  float s = 0.f;
  for (int d = 0; d < D; d++) s += __bfloat162float(a[d]) * __bfloat162float(b[d]);
  return s;
}

// out [bh, L, D] and lse [bh, L]
__global__ void ref_forward(Ref r, float* out, float* lse) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= r.bh * r.L) return;
  const int64_t bh = id / r.L;
  const int i = int(id % r.L);
  const bf16* qi = r.q + r.qr.at(bh, i);
  float m = -INFINITY;
  for (int j = 0; j < r.S; j++)
    if (!(r.causal && j > i)) m = fmaxf(m, r.scale * dot_rows(qi, r.k + r.kr.at(bh, j), r.D));
  float sum = 0.f;
  float* o = out + id * r.D;
  for (int d = 0; d < r.D; d++) o[d] = 0.f;
  for (int j = 0; j < r.S; j++) {
    if (r.causal && j > i) continue;
    const float p = expf(r.scale * dot_rows(qi, r.k + r.kr.at(bh, j), r.D) - m);
    sum += p;
    const bf16* vj = r.v + r.vr.at(bh, j);
    for (int d = 0; d < r.D; d++) o[d] += p * __bfloat162float(vj[d]);
  }
  for (int d = 0; d < r.D; d++) o[d] /= sum;
  lse[id] = m + logf(sum);
}

// delta[row] = dout . out (the reference out), then dq
__global__ void ref_dq(Ref r, const float* out, const float* lse, float* delta, float* dq) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= r.bh * r.L) return;
  const int64_t bh = id / r.L;
  const int i = int(id % r.L);
  const bf16* qi = r.q + r.qr.at(bh, i);
  const bf16* doi = r.dout + r.dor.at(bh, i);
  float dlt = 0.f;
  for (int d = 0; d < r.D; d++) dlt += __bfloat162float(doi[d]) * out[id * r.D + d];
  delta[id] = dlt;
  float* g = dq + id * r.D;
  for (int d = 0; d < r.D; d++) g[d] = 0.f;
  for (int j = 0; j < r.S; j++) {
    if (r.causal && j > i) continue;
    const bf16* kj = r.k + r.kr.at(bh, j);
    const float p = expf(r.scale * dot_rows(qi, kj, r.D) - lse[id]);
    const float ds = p * (dot_rows(doi, r.v + r.vr.at(bh, j), r.D) - dlt);
    for (int d = 0; d < r.D; d++) g[d] += r.scale * ds * __bfloat162float(kj[d]);
  }
}

__global__ void ref_dkdv(Ref r, const float* lse, const float* delta, float* dk, float* dv) {
  const int64_t id = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= r.bh * r.S) return;
  const int64_t bh = id / r.S;
  const int j = int(id % r.S);
  const bf16* kj = r.k + r.kr.at(bh, j);
  const bf16* vj = r.v + r.vr.at(bh, j);
  float* gk = dk + id * r.D;
  float* gv = dv + id * r.D;
  for (int d = 0; d < r.D; d++) gk[d] = gv[d] = 0.f;
  for (int i = 0; i < r.L; i++) {
    if (r.causal && j > i) continue;
    const int64_t row = bh * r.L + i;
    const bf16* qi = r.q + r.qr.at(bh, i);
    const bf16* doi = r.dout + r.dor.at(bh, i);
    const float p = expf(r.scale * dot_rows(qi, kj, r.D) - lse[row]);
    const float ds = p * (dot_rows(doi, vj, r.D) - delta[row]);
    for (int d = 0; d < r.D; d++) {
      gv[d] += p * __bfloat162float(doi[d]);
      gk[d] += r.scale * ds * __bfloat162float(qi[d]);
    }
  }
}

// ---- host side ------------------------------------------------------------------------------
template <class T>
T* device(size_t n) {
  T* p;
  CHECK(cudaMalloc(&p, n * sizeof(T)));
  CHECK(cudaMemset(p, 0, n * sizeof(T)));
  return p;
}

template <class T>
std::vector<T> host(const T* p, size_t n) {
  std::vector<T> h(n);
  CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

float to_f(float x) { return x; }
float to_f(bf16 x) { return __bfloat162float(x); }

// max |got - want| / max |want|; got [bh, n, D] in the layout `rows`, want dense
template <class T>
double rel_error(const T* got_d, const Rows& rows, size_t got_n, const float* want_d, int64_t bh, int n, int D) {
  const std::vector<T> got = host(got_d, got_n);
  const std::vector<float> want = host(want_d, size_t(bh) * n * D);
  double err = 0, big = 1e-6;
  for (int64_t b = 0; b < bh; b++)
    for (int i = 0; i < n; i++)
      for (int d = 0; d < D; d++) {
        const double w = want[(b * n + i) * D + d];
        const int64_t at = (b / rows.heads) * rows.batch + (b % rows.heads) * rows.head + i * rows.row;
        const double x = to_f(got[at + d]);
        if (!std::isfinite(x)) return INFINITY;
        err = std::max(err, std::abs(x - w));
        big = std::max(big, std::abs(w));
      }
  return err / big;
}

struct Problem {
  int B, H, L, S, D;
  bool causal, gpt_layout;  // gpt_layout: q, k, v, dout in [B, L, H, D] memory
  int64_t bh() const { return int64_t(B) * H; }
  Rows rows(int n) const {  // of an input
    Rows r;
    r.heads = H;
    if (gpt_layout) r.batch = int64_t(n) * H * D, r.head = D, r.row = int64_t(H) * D;
    else r.batch = int64_t(H) * n * D, r.head = int64_t(n) * D, r.row = D;
    return r;
  }
  Rows dense(int n) const {
    Rows r;
    r.heads = H, r.batch = int64_t(H) * n * D, r.head = int64_t(n) * D, r.row = D;
    return r;
  }
};

bf16* random_bf16(size_t n, std::mt19937& gen, float amp) {
  std::uniform_real_distribution<float> u(-amp, amp);
  std::vector<bf16> h(n);
  for (auto& x : h) x = __float2bfloat16(u(gen));
  bf16* d = device<bf16>(n);
  CHECK(cudaMemcpy(d, h.data(), n * sizeof(bf16), cudaMemcpyHostToDevice));
  return d;
}

template <int D, int BC, int WGS, bool QR = false>
void forward(const Problem& p, const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse, float scale) {
  using Sh = sm90::FwdShape<D, BC, WGS>;
  auto kernel = sm90::flash_fwd_kernel<D, BC, WGS, QR>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Sh::kSmem)));
  const dim3 grid(unsigned(p.bh()), (p.L + Sh::kBR - 1) / Sh::kBR);
  kernel<<<grid, Sh::kThreads, Sh::kSmem>>>(q, k, v, o, lse, p.rows(p.L), p.rows(p.S), p.rows(p.S), p.dense(p.L), p.L,
                                           p.S, p.causal, scale);
}

template <int D>
void backward(const Problem& p, const bf16* q, const bf16* k, const bf16* v, const bf16* o, const bf16* dout,
              const float* lse, float* delta, float* lse2, float* dq_acc, bf16* dq, bf16* dk, bf16* dv, float scale) {
  const int64_t rows = p.bh() * p.L;
  fl::launch_bwd_delta<bf16>(dout, o, lse, delta, lse2, dq_acc, p.rows(p.L), p.dense(p.L), rows, p.L, p.D, 0);
  using Sh = sm90::BwdShape<D>;
  auto kernel = sm90::flash_bwd_kernel<D>;
  CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Sh::kSmem)));
  const dim3 grid(unsigned(p.bh()), (p.S + Sh::kBC - 1) / Sh::kBC);
  kernel<<<grid, Sh::kThreads, Sh::kSmem>>>(q, k, v, dout, lse2, delta, dq_acc, dk, dv, p.rows(p.L), p.rows(p.S),
                                           p.rows(p.S), p.rows(p.L), p.dense(p.S), p.dense(p.S), p.L, p.S, p.causal,
                                           scale);
  fl::launch_bwd_dq<bf16>(dq_acc, dq, p.dense(p.L), rows, p.L, p.D, scale, 0);
}

struct Buffers {
  bf16 *q, *k, *v, *dout, *o, *dq, *dk, *dv;
  float *lse, *delta, *lse2, *dq_acc;
  Buffers(const Problem& p, std::mt19937& gen) {
    const size_t nq = size_t(p.bh()) * p.L * p.D, nk = size_t(p.bh()) * p.S * p.D;
    q = random_bf16(nq, gen, 2.f), k = random_bf16(nk, gen, 2.f), v = random_bf16(nk, gen, 1.f);
    dout = random_bf16(nq, gen, 1.f);
    o = device<bf16>(nq), dq = device<bf16>(nq), dk = device<bf16>(nk), dv = device<bf16>(nk);
    lse = device<float>(p.bh() * p.L), delta = device<float>(p.bh() * p.L), lse2 = device<float>(p.bh() * p.L);
    dq_acc = device<float>(nq);
  }
  ~Buffers() {
    for (void* x : {(void*)q, (void*)k, (void*)v, (void*)dout, (void*)o, (void*)dq, (void*)dk, (void*)dv, (void*)lse,
                    (void*)delta, (void*)lse2, (void*)dq_acc})
      cudaFree(x);
  }
};

template <int D, int BC, int WGS, bool QR = false>
bool check(const Problem& p, std::mt19937& gen) {
  Buffers b(p, gen);
  const float scale = 1.f / std::sqrt(float(D));
  forward<D, BC, WGS, QR>(p, b.q, b.k, b.v, b.o, b.lse, scale);
  backward<D>(p, b.q, b.k, b.v, b.o, b.dout, b.lse, b.delta, b.lse2, b.dq_acc, b.dq, b.dk, b.dv, scale);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  const size_t nq = size_t(p.bh()) * p.L * D, nk = size_t(p.bh()) * p.S * D;
  float* r_out = device<float>(nq);
  float* r_lse = device<float>(p.bh() * p.L);
  float* r_delta = device<float>(p.bh() * p.L);
  float* r_dq = device<float>(nq);
  float* r_dk = device<float>(nk);
  float* r_dv = device<float>(nk);
  Ref r{b.q, b.k, b.v, b.dout, p.rows(p.L), p.rows(p.S), p.rows(p.S), p.rows(p.L), p.bh(), p.L, p.S, D, p.causal, scale};
  ref_forward<<<unsigned((p.bh() * p.L + 127) / 128), 128>>>(r, r_out, r_lse);
  ref_dq<<<unsigned((p.bh() * p.L + 127) / 128), 128>>>(r, r_out, r_lse, r_delta, r_dq);
  ref_dkdv<<<unsigned((p.bh() * p.S + 127) / 128), 128>>>(r, r_lse, r_delta, r_dk, r_dv);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());

  Rows flat;  // lse: [bh, L, 1]
  flat.heads = 1, flat.batch = p.L, flat.head = 0, flat.row = 1;
  const double e_out = rel_error(b.o, p.dense(p.L), nq, r_out, p.bh(), p.L, D);
  const double e_lse = rel_error(b.lse, flat, p.bh() * p.L, r_lse, p.bh(), p.L, 1);
  const double e_dq = rel_error(b.dq, p.dense(p.L), nq, r_dq, p.bh(), p.L, D);
  const double e_dk = rel_error(b.dk, p.dense(p.S), nk, r_dk, p.bh(), p.S, D);
  const double e_dv = rel_error(b.dv, p.dense(p.S), nk, r_dv, p.bh(), p.S, D);
  for (float* x : {r_out, r_lse, r_delta, r_dq, r_dk, r_dv}) cudaFree(x);
  const bool ok = e_out < 2e-2 && e_lse < 1e-3 && e_dq < 3e-2 && e_dk < 3e-2 && e_dv < 3e-2;
  std::printf("%-4s D=%-3d BC=%-3d WGS=%d  B=%d H=%d L=%-4d S=%-4d %-7s %-5s  out %.1e lse %.1e dq %.1e dk %.1e dv %.1e\n",
              ok ? "ok" : "FAIL", D, BC, WGS, p.B, p.H, p.L, p.S, p.causal ? "causal" : "full",
              p.gpt_layout ? "gpt" : "dense", e_out, e_lse, e_dq, e_dk, e_dv);
  return ok;
}

template <class F>
float time_ms(F f, int reps = 20) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 3; i++) f();
  CHECK(cudaEventRecord(a));
  for (int i = 0; i < reps; i++) f();
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  CHECK(cudaGetLastError());
  return ms / reps;
}

template <int D, int BC, int WGS, bool QR = false>
void bench(bool causal, bool gpt_layout, bool backward_too = true) {
  const Problem p{8, 12, 1024, 1024, D, causal, gpt_layout};
  std::mt19937 gen(7);
  Buffers b(p, gen);
  const float scale = 1.f / std::sqrt(float(D));
  const double flops = 4.0 * p.bh() * p.L * p.S * D * (causal ? 0.5 : 1.0);
  const float f = time_ms([&] { forward<D, BC, WGS, QR>(p, b.q, b.k, b.v, b.o, b.lse, scale); });
  const float bw = !backward_too ? 0.f : time_ms([&] {
    backward<D>(p, b.q, b.k, b.v, b.o, b.dout, b.lse, b.delta, b.lse2, b.dq_acc, b.dq, b.dk, b.dv, scale);
  });
  std::printf("bench (8, 12, 1024, %d) %-6s %-5s fwd BC=%-3d WGS=%d QR=%d: fwd %.3f ms (%.0f TFLOP/s)  bwd %.3f ms (%.0f TFLOP/s)  "
              "fwd+bwd %.3f ms (%.0f TFLOP/s)\n",
              D, causal ? "causal" : "full", gpt_layout ? "gpt" : "dense", BC, WGS, int(QR), f, flops / f / 1e9, bw,
              2.5 * flops / bw / 1e9, f + bw, 3.5 * flops / (f + bw) / 1e9);
}

// the backward alone (its three kernels)
template <int D>
void bench_backward(bool causal) {
  const Problem p{8, 12, 1024, 1024, D, causal, true};
  std::mt19937 gen(7);
  Buffers b(p, gen);
  const float scale = 1.f / std::sqrt(float(D));
  const double flops = 2.5 * 4.0 * p.bh() * p.L * p.S * D * (causal ? 0.5 : 1.0);
  forward<D, 64, 2>(p, b.q, b.k, b.v, b.o, b.lse, scale);
  const float bw = time_ms([&] {
    backward<D>(p, b.q, b.k, b.v, b.o, b.dout, b.lse, b.delta, b.lse2, b.dq_acc, b.dq, b.dk, b.dv, scale);
  });
  std::printf("bench (8, 12, 1024, %d) %-6s gpt   bwd: %.3f ms (%.0f TFLOP/s)\n", D, causal ? "causal" : "full", bw,
              flops / bw / 1e9);
}

int main(int argc, char** argv) {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s (compute capability %d.%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  if (prop.major != 9 || prop.minor != 0) {
    std::printf("the sm_90a kernels need compute capability 9.0\n");
    return 1;
  }
  if (argc > 1 && std::string(argv[1]) == "profile") {  // one causal GPT-2 shape, for ncu
    bench<64, 64, 2>(true, true);
    return 0;
  }
  std::mt19937 gen(1);
  bool ok = true;
  for (bool causal : {false, true})
    for (bool gpt : {false, true}) {
      ok &= check<64, 64, 2>({2, 3, 256, 256, 64, causal, gpt}, gen);
      ok &= check<64, 64, 2>({1, 2, 333, 333, 64, causal, gpt}, gen);
      ok &= check<64, 64, 2, true>({1, 2, 200, 200, 64, causal, gpt}, gen);
      ok &= check<64, 128, 2>({1, 2, 333, 333, 64, causal, gpt}, gen);
      ok &= check<64, 64, 1>({1, 2, 50, 50, 64, causal, gpt}, gen);
      ok &= check<128, 64, 2>({2, 2, 256, 256, 128, causal, gpt}, gen);
      ok &= check<128, 64, 2, true>({1, 2, 190, 190, 128, causal, gpt}, gen);
    }
  ok &= check<64, 64, 2>({1, 2, 100, 300, 64, false, false}, gen);  // L != S
  ok &= check<64, 64, 2>({1, 2, 300, 100, 64, false, true}, gen);
  ok &= check<64, 64, 2>({1, 2, 100, 300, 64, true, false}, gen);  // causal, L != S: key j <= row i
  ok &= check<64, 64, 2>({1, 2, 300, 100, 64, true, true}, gen);
  std::printf("%s\n", ok ? "all checks passed" : "SOME CHECKS FAILED");
  if (!ok) return 1;
  for (bool causal : {true, false}) {
    bench_backward<64>(causal);
    bench_backward<128>(causal);
  }
  for (bool causal : {true, false}) {
    bench<64, 64, 2>(causal, true, false);
    bench<64, 64, 2, true>(causal, true, false);
    bench<64, 128, 2>(causal, true, false);
    bench<64, 64, 1>(causal, true, false);
    bench<128, 64, 2>(causal, true, false);
    bench<128, 128, 2>(causal, true, false);
  }
  return 0;
}
