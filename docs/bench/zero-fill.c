/* Zero-fill primitives on 128 KiB buffers of a shared memfd mapping (as a
 * vhost-user frontend's guest memory), cycling over NB buffers: which fill
 * the null driver's read-zeroes should use. docs/BENCHMARKS.md quotes it.
 *
 *   gcc -O2 -o /tmp/zero-fill docs/bench/zero-fill.c
 *   taskset -c 1 /tmp/zero-fill 8      # 8 buffers: QD8 of 128k reads
 *   taskset -c 1 /tmp/zero-fill 64
 *
 * Rows the CPU cannot run are left out: AVX2 and AVX-512 by the compiler's
 * CPU check, CLZERO (AMD only) by CPUID leaf 0x80000008, EBX bit 0. */
#define _GNU_SOURCE
#include <cpuid.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define BS 131072

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void fill_memset(char *p, size_t n) { memset(p, 0, n); }

static void fill_stosb(char *p, size_t n) {
    asm volatile("rep stosb" : "+D"(p), "+c"(n) : "a"(0) : "memory");
}

__attribute__((target("avx2"))) static void fill_avx2(char *p, size_t n) {
    __m256i z = _mm256_setzero_si256();
    for (size_t i = 0; i < n; i += 64) {
        _mm256_store_si256((__m256i *)(p + i), z);
        _mm256_store_si256((__m256i *)(p + i + 32), z);
    }
}

__attribute__((target("avx2"))) static void fill_avx2_nt(char *p, size_t n) {
    __m256i z = _mm256_setzero_si256();
    for (size_t i = 0; i < n; i += 64) {
        _mm256_stream_si256((__m256i *)(p + i), z);
        _mm256_stream_si256((__m256i *)(p + i + 32), z);
    }
    _mm_sfence();
}

__attribute__((target("avx512f"))) static void fill_avx512_nt(char *p, size_t n) {
    __m512i z = _mm512_setzero_si512();
    for (size_t i = 0; i < n; i += 64)
        _mm512_stream_si512((__m512i *)(p + i), z);
    _mm_sfence();
}

static void fill_clzero(char *p, size_t n) {
    for (size_t i = 0; i < n; i += 64)
        asm volatile("clzero" ::"a"(p + i) : "memory");
    asm volatile("sfence" ::: "memory");
}

static int has_clzero(void) {
    unsigned a, b, c, d;
    return __get_cpuid(0x80000008, &a, &b, &c, &d) && (b & 1);
}

int main(int argc, char **argv) {
    int nb = argc > 1 ? atoi(argv[1]) : 8;
    size_t size = (size_t)nb * BS;
    int fd = memfd_create("guest", 0);
    if (fd < 0 || ftruncate(fd, size) != 0)
        return 1;
    char *m = mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return 1;
    memset(m, 1, size);
    struct {
        const char *name;
        void (*fill)(char *, size_t);
        int runs;
    } f[] = {{"memset", fill_memset, 1},
             {"rep stosb", fill_stosb, 1},
             {"avx2 store", fill_avx2, __builtin_cpu_supports("avx2")},
             {"avx2 stream", fill_avx2_nt, __builtin_cpu_supports("avx2")},
             {"avx512 stream", fill_avx512_nt, __builtin_cpu_supports("avx512f")},
             {"clzero", fill_clzero, has_clzero()}};
    int n = sizeof f / sizeof f[0];
    for (int round = 0; round < 3; round++)
        for (int k = 0; k < n; k++) {
            if (!f[k].runs)
                continue;
            int iters = 20000;
            double t = now();
            for (int i = 0; i < iters; i++)
                f[k].fill(m + (size_t)(i % nb) * BS, BS);
            double ns = (now() - t) / iters;
            printf("%-14s %3d buffers  %5.0f ns per 128k  %5.1f GB/s\n", f[k].name, nb, ns, BS / ns);
        }
    return 0;
}
