/* A malloc wrapper for tools/heap_profile.py, preloaded (LD_PRELOAD) into the process it measures:
 * it counts the bytes of every live block (malloc_usable_size) and, while recording, logs each
 * allocation and free of HEAP_COUNTER_MIN_BLOCK bytes or more with its wall-clock time (the clock
 * ONNX Runtime's profiler stamps its events with), so that the two can be set side by side.
 * Linux and glibc only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define HEAP_COUNTER_EVENTS (1 << 22)
#define HEAP_COUNTER_MIN_BLOCK (64 * 1024)

typedef struct { long long ns, bytes; void *block; } event;

static void *(*next_malloc)(size_t), *(*next_calloc)(size_t, size_t), *(*next_realloc)(void *, size_t);
static void (*next_free)(void *);
static int (*next_posix_memalign)(void **, size_t, size_t);
static void *(*next_aligned_alloc)(size_t, size_t), *(*next_memalign)(size_t, size_t);
static char early[1 << 16];      /* calloc's answers while dlsym itself allocates */
static size_t early_used;
static _Atomic long long live, peak;
static _Atomic int recording;
static _Atomic long count;
static event *events;

static void resolve(void) {
  if (next_malloc) return;
  next_calloc = dlsym(RTLD_NEXT, "calloc");
  next_malloc = dlsym(RTLD_NEXT, "malloc");
  next_realloc = dlsym(RTLD_NEXT, "realloc");
  next_free = dlsym(RTLD_NEXT, "free");
  next_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
  next_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
  next_memalign = dlsym(RTLD_NEXT, "memalign");
}

static void note(void *block, long long bytes) {
  if (!block) return;
  long long now_live = atomic_fetch_add(&live, bytes) + bytes;
  long long seen = atomic_load(&peak);
  while (now_live > seen && !atomic_compare_exchange_weak(&peak, &seen, now_live)) {}
  if (atomic_load(&recording) && (bytes >= HEAP_COUNTER_MIN_BLOCK || bytes <= -HEAP_COUNTER_MIN_BLOCK)) {
    long i = atomic_fetch_add(&count, 1);
    if (i < HEAP_COUNTER_EVENTS) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      events[i] = (event){ts.tv_sec * 1000000000LL + ts.tv_nsec, bytes, block};
    }
  }
}

static int is_early(void *p) { return (char *)p >= early && (char *)p < early + sizeof early; }

void *malloc(size_t n) { resolve(); void *p = next_malloc(n); note(p, p ? (long long)malloc_usable_size(p) : 0); return p; }
void *calloc(size_t a, size_t b) {
  if (!next_calloc) { void *p = early + early_used; early_used += (a * b + 15) & ~(size_t)15; return p; }
  void *p = next_calloc(a, b); note(p, p ? (long long)malloc_usable_size(p) : 0); return p;
}
void free(void *p) {
  if (!p || is_early(p)) return;
  resolve(); note(p, -(long long)malloc_usable_size(p)); next_free(p);
}
void *realloc(void *p, size_t n) {
  resolve();
  if (p && is_early(p)) { void *q = malloc(n); if (q) memcpy(q, p, n); return q; }
  long long old = p ? (long long)malloc_usable_size(p) : 0;
  void *q = next_realloc(p, n);
  if (q || n == 0) { if (p) note(p, -old); note(q, q ? (long long)malloc_usable_size(q) : 0); }
  return q;
}
int posix_memalign(void **out, size_t alignment, size_t n) {
  resolve(); int r = next_posix_memalign(out, alignment, n);
  if (!r) note(*out, (long long)malloc_usable_size(*out));
  return r;
}
void *aligned_alloc(size_t alignment, size_t n) { resolve(); void *p = next_aligned_alloc(alignment, n); note(p, p ? (long long)malloc_usable_size(p) : 0); return p; }
void *memalign(size_t alignment, size_t n) { resolve(); void *p = next_memalign(alignment, n); note(p, p ? (long long)malloc_usable_size(p) : 0); return p; }

/* The interface tools/heap_profile.py calls through ctypes. */
long long heap_counter_live(void) { return live; }
long long heap_counter_peak(void) { return peak; }
void heap_counter_record(int on) {
  if (!events) { resolve(); events = next_malloc(sizeof(event) * HEAP_COUNTER_EVENTS); }
  if (on) { count = 0; peak = live; }
  recording = on;
}
long heap_counter_dump(const char *path) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  long n = count < HEAP_COUNTER_EVENTS ? count : HEAP_COUNTER_EVENTS;
  for (long i = 0; i < n; i++) fprintf(f, "%lld %lld %p\n", events[i].ns, events[i].bytes, events[i].block);
  fclose(f);
  return n;
}
