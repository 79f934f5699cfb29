/* The core's clock and its peak int8 (VPDPBUSD) and fp32 (VFMADD231PS) throughput on
 * 512-bit registers, the denominators of the "share of peak" figures in bench/README.md.
 *
 *   gcc -O2 -mavx512f -mavx512vnni bench/studies/cpu_peak.c -o /tmp/cpu_peak && /tmp/cpu_peak
 *
 * Clock: a chain of dependent 64-bit IMULs (latency 3 on Zen 4 and on Intel cores).
 * Peaks: 16 independent accumulators per loop iteration, more than latency x ports on
 * any current core, so the loops run at the instructions' issue rate. Best of 15 rounds:
 * the minimum is the figure least disturbed by other processes on a shared machine. */
#include <stdint.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define X16(op) \
  op " %%zmm16,%%zmm17,%%zmm0\n" op " %%zmm16,%%zmm17,%%zmm1\n" op " %%zmm16,%%zmm17,%%zmm2\n"     \
  op " %%zmm16,%%zmm17,%%zmm3\n" op " %%zmm16,%%zmm17,%%zmm4\n" op " %%zmm16,%%zmm17,%%zmm5\n"     \
  op " %%zmm16,%%zmm17,%%zmm6\n" op " %%zmm16,%%zmm17,%%zmm7\n" op " %%zmm16,%%zmm17,%%zmm8\n"     \
  op " %%zmm16,%%zmm17,%%zmm9\n" op " %%zmm16,%%zmm17,%%zmm10\n" op " %%zmm16,%%zmm17,%%zmm11\n"   \
  op " %%zmm16,%%zmm17,%%zmm12\n" op " %%zmm16,%%zmm17,%%zmm13\n" op " %%zmm16,%%zmm17,%%zmm14\n" \
  op " %%zmm16,%%zmm17,%%zmm15\n"
#define CLOBBER16 "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", \
  "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"

int main(void) {
  const long iters = 20000000;
  double vnni = 1e9, fma = 1e9, cycle = 1e9;  /* seconds per instruction / per cycle */
  for (int round = 0; round < 15; ++round) {
    double t0 = now();
    for (long i = 0; i < iters; ++i) __asm__ volatile(X16("vpdpbusd") ::: CLOBBER16);
    double s = (now() - t0) / (iters * 16.0);
    if (s < vnni) vnni = s;
    t0 = now();
    for (long i = 0; i < iters; ++i) __asm__ volatile(X16("vfmadd231ps") ::: CLOBBER16);
    s = (now() - t0) / (iters * 16.0);
    if (s < fma) fma = s;
    uint64_t x = 1;
    t0 = now();
    for (long i = 0; i < iters; ++i) __asm__ volatile("imul %0,%0\nimul %0,%0\nimul %0,%0\nimul %0,%0\n" : "+r"(x));
    s = (now() - t0) / (iters * 4.0 * 3);
    if (s < cycle) cycle = s;
  }
  /* One VPDPBUSD on zmm: 64 int8 multiply-adds = 128 ops; one VFMADD231PS: 32 flops. */
  printf("clock %.2f GHz\n", 1e-9 / cycle);
  printf("vpdpbusd zmm: %.2f per cycle, peak %.0f GOP/s (int8 multiply-adds x 2)\n", cycle / vnni,
         128e-9 / vnni);
  printf("vfmadd231ps zmm: %.2f per cycle, peak %.0f GFLOP/s\n", cycle / fma, 32e-9 / fma);
  return 0;
}
