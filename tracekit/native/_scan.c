/* Native scan of a piece of the event array: `[` + whole events + `]` -> a batch's columns.
 *
 * The same batch `tracekit.loader.batch.build_batch` makes from msgspec structs, built in
 * one pass over the text with no Python object per event. It takes the common shape of a
 * trace only: every item an object; `ph`, `cat`, `name`, `bp`, `s` strings; `pid`, `tid`,
 * `id` integers, strings or numbers; `ts`, `dur` numbers without an exponent; `args` an
 * object whose typed keys hold values of their column's type. Anything else (invalid JSON,
 * a field of another type, a number out of range, nesting deeper than MAX_DEPTH, a key
 * written with escapes, an `args` key given twice) makes `scan` return None and the
 * piece goes through the Python path, which is the reference for every edge case. Text
 * that is not UTF-8 is handed back too (the Python path replaces and counts it).
 *
 * Phase 1 walks the text with the GIL released and fills C arrays; phase 2 builds the
 * column buffers (`Buffer`: malloc'd memory that Polars takes over as Arrow arrays,
 * `arrow_column`) grouped by the frame each event feeds.
 *
 * Times: `ts`/`dur` in microseconds become integer nanoseconds from the digits (at most
 * three decimals kept, the fourth rounds half away from zero), as
 * `tracekit.loader.columns.us_text_to_ns` does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_arrow.h"

#define INT_NULL INT64_MIN
#define MAX_US 9223372036854775LL
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the eight-bytes-at-a-time reads assume a little-endian machine (the install then skips this scanner)"
#endif

#define MAX_DEPTH 200
#define MAX_ARGS 64
#define N_SHAPES 5
#define KEY_SLOTS 256
#define REST_KEY (MAX_ARGS + N_SHAPES) /* an args key that is neither typed nor a shape */
#define MAX_REST_KEYS 64 /* more in one args: the Python path (rest_seen is linear per key) */

enum { K_INT = 0, K_FLOAT = 1, K_STR = 2, K_LIST = 3 };
enum { V_NONE = 0, V_INT = 1, V_STR = 2, V_NUM = 3 }; /* pid/tid/id value kinds */
enum { F_PH, F_CAT, F_NAME, F_BP, F_S, N_STRF };       /* interned string fields */

typedef struct {
    Py_ssize_t start;
    Py_ssize_t len;
} Span;

typedef struct {
    int64_t v;       /* V_INT: the value; else unused */
    Span sp;         /* V_STR (inside the quotes) / V_NUM: the text */
    unsigned char k; /* V_* */
    unsigned char esc;
} Scalar;

typedef struct {
    int32_t str[N_STRF];
    Scalar pid, tid, id;
    int64_t ts, dur;
    Span args; /* len < 0: absent */
    Py_ssize_t a0; /* this event's entries: entries[a0 : a0 + an] */
    int32_t an;
} Event;

/* One member of an event's `args`: a typed key's value (key < nargs), a shape key's raw
 * text (key - nargs), or any other key (REST_KEY). Every member keeps where its key (with
 * the quotes) and its value are written, for the remainder column. */
typedef struct {
    int32_t key;
    unsigned char null; /* written as null: reads as absent */
    unsigned char esc;  /* a string with escapes */
    int32_t kl, vl;     /* key (quoted) and value lengths */
    Py_ssize_t ks, vs;  /* key and value starts */
    int64_t v[3];       /* int; double bits; string (start, len); (x, y, z); shape (start, len) */
} Entry;

/* ---- interning of strings (by their raw text) ---------------------------------------- */

typedef struct {
    Span *items;
    unsigned char *esc;
    Py_ssize_t n, cap;
    int32_t *slots;
    Py_ssize_t nslots;
} Intern;

static uint64_t hash_bytes(const char *s, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0x9E3779B97F4A7C15ULL;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t tail = 0;
    memcpy(&tail, s, (size_t)n);
    h = (h ^ tail) * 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 32);
}

static int intern_init(Intern *t) {
    memset(t, 0, sizeof(*t));
    t->nslots = 64;
    t->slots = malloc(sizeof(int32_t) * t->nslots);
    if (!t->slots) return -1;
    memset(t->slots, 0xff, sizeof(int32_t) * t->nslots);
    return 0;
}

static void intern_free(Intern *t) {
    free(t->items);
    free(t->esc);
    free(t->slots);
}

static int intern_grow(Intern *t, const char *base) {
    Py_ssize_t nslots = t->nslots * 2;
    int32_t *slots = malloc(sizeof(int32_t) * nslots);
    if (!slots) return -1;
    memset(slots, 0xff, sizeof(int32_t) * nslots);
    for (Py_ssize_t i = 0; i < t->n; i++) {
        uint64_t h = hash_bytes(base + t->items[i].start, t->items[i].len);
        Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(nslots - 1));
        while (slots[j] >= 0) j = (j + 1) & (nslots - 1);
        slots[j] = (int32_t)i;
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = nslots;
    return 0;
}

/* The id of the string at base[start:start+len] (raw JSON text, escapes included). */
static int32_t intern(Intern *t, const char *base, Py_ssize_t start, Py_ssize_t len, int esc) {
    uint64_t h = hash_bytes(base + start, len);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(t->nslots - 1));
    while (t->slots[j] >= 0) {
        Span *s = &t->items[t->slots[j]];
        if (s->len == len && memcmp(base + s->start, base + start, len) == 0) return t->slots[j];
        j = (j + 1) & (t->nslots - 1);
    }
    if (t->n == t->cap) {
        Py_ssize_t cap = t->cap ? t->cap * 2 : 64;
        Span *items = realloc(t->items, sizeof(Span) * cap);
        if (!items) return -1;
        t->items = items;
        unsigned char *e = realloc(t->esc, cap);
        if (!e) return -1;
        t->esc = e;
        t->cap = cap;
    }
    int32_t id = (int32_t)t->n++;
    t->items[id].start = start;
    t->items[id].len = len;
    t->esc[id] = (unsigned char)esc;
    t->slots[j] = id;
    if (t->n * 2 > t->nslots && intern_grow(t, base) < 0) return -1;
    return id;
}

/* ---- the parse (phase 1, no GIL) ------------------------------------------------------- */

typedef struct {
    const char *base;
    const char *p;
    const char *end;
    /* the args keys that become columns */
    int nargs;
    const char *arg_key[MAX_ARGS];
    Py_ssize_t arg_len[MAX_ARGS];
    int arg_kind[MAX_ARGS];
    const char *shape_key[N_SHAPES];
    Py_ssize_t shape_len[N_SHAPES];
    unsigned char key_slot[KEY_SLOTS]; /* args key lookup: 1 + index (typed keys, then shapes); 0 empty */
    /* per event */
    Event *ev;
    Py_ssize_t n, cap;
    Entry *ent;
    Py_ssize_t nent, capent;
    Intern strs[N_STRF];
    int nomem;
} Scan;

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
#define LOWS 0x7F7F7F7F7F7F7F7FULL

/* The high bit of each byte of `x` that is zero (exact for every byte). */
static inline uint64_t zero_bytes(uint64_t x) {
    return ~(((x & LOWS) + LOWS) | x | LOWS);
}

static inline int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* Skip JSON whitespace; runs of it (indentation) eight bytes at a time. */
static inline void ws(Scan *s) {
    const char *p = s->p, *end = s->end;
    for (int i = 0; i < 2; i++, p++) { /* the usual cases: none, or one space */
        if (p >= end || !is_ws(*p)) {
            s->p = p;
            return;
        }
    }
    while (end - p >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        uint64_t blank = zero_bytes(v ^ (ONES * ' ')) | zero_bytes(v ^ (ONES * '\n')) |
                         zero_bytes(v ^ (ONES * '\r')) | zero_bytes(v ^ (ONES * '\t'));
        uint64_t other = ~blank & HIGHS;
        if (other) {
            s->p = p + (__builtin_ctzll(other) >> 3);
            return;
        }
        p += 8;
    }
    while (p < end && is_ws(*p)) p++;
    s->p = p;
}

static inline int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The bytes of `v` that are '"', '\\', a control character or not ASCII (high bit set in each;
 * the lowest one is exact). */
static inline uint64_t string_stops(uint64_t v) {
    uint64_t q = v ^ (ONES * '"'), b = v ^ (ONES * '\\');
    return ((q - ONES) & ~q & HIGHS) | ((b - ONES) & ~b & HIGHS) | ((v - ONES * 0x20) & ~v & HIGHS) | (v & HIGHS);
}

/* The length of the UTF-8 sequence at p (a lead byte >= 0x80), or 0 when it is not valid
 * UTF-8 (overlong forms, surrogates and code points past U+10FFFF included, as Python's
 * strict decoder has it). */
static inline int utf8_length(const unsigned char *p, const unsigned char *end) {
    unsigned char c = p[0];
    int n;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    if (end - p < n) return 0;
    if (p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF) return 0;
    return n;
}

/* The code unit of the escape `\\uXXXX` at p; -1 when p does not start one. */
static inline int read_u_escape(const char *p, const char *end, uint32_t *cp) {
    if (end - p < 6 || p[0] != '\\' || p[1] != 'u') return -1;
    *cp = 0;
    for (int i = 2; i < 6; i++) {
        int h = hexval(p[i]);
        if (h < 0) return -1;
        *cp = *cp * 16 + (uint32_t)h;
    }
    return 0;
}

/* A string at s->p (the opening quote). Sets the span inside the quotes and whether it has
 * escapes; -1 when it is not a valid JSON string. */
static int read_string(Scan *s, Span *out, int *esc) {
    const char *p = s->p + 1;
    *esc = 0;
    while (p < s->end) {
        while (s->end - p >= 8) { /* eight bytes at a time up to the next stop */
            uint64_t v;
            memcpy(&v, p, 8);
            uint64_t stops = string_stops(v);
            if (stops) {
                p += __builtin_ctzll(stops) >> 3;
                break;
            }
            p += 8;
        }
        if (p >= s->end) break;
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            out->start = (s->p + 1) - s->base;
            out->len = p - (s->p + 1);
            s->p = p + 1;
            return 0;
        }
        if (c == '\\') {
            *esc = 1;
            if (p + 1 >= s->end) return -1;
            char e = p[1];
            if (e == 'u') { /* a surrogate only as a high-low pair: msgspec refuses a lone one anywhere */
                uint32_t cp;
                if (read_u_escape(p, s->end, &cp) < 0) return -1;
                p += 6;
                if (cp >= 0xDC00 && cp <= 0xDFFF) return -1;
                if (cp >= 0xD800 && cp <= 0xDBFF) {
                    uint32_t lo;
                    if (read_u_escape(p, s->end, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF) return -1;
                    p += 6;
                }
            } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' ||
                       e == 't') {
                p += 2;
            } else {
                return -1;
            }
            continue;
        }
        if (c < 0x20) return -1;
        if (c >= 0x80) { /* text that is not UTF-8: the Python path replaces and counts it */
            int n = utf8_length((const unsigned char *)p, (const unsigned char *)s->end);
            if (!n) return -1;
            p += n;
            continue;
        }
        p++;
    }
    return -1;
}

typedef struct {
    Span sp;
    int is_int;   /* no fraction, no exponent */
    int has_exp;
    int overflow; /* an integer beyond int64 */
    int64_t v;    /* the integer, when is_int and not overflow */
    int neg;
    int long_int;          /* more than 19 digits before any fraction */
    uint64_t mag;          /* those digits' value, when not long_int */
    const char *frac;      /* the fraction's digits (NULL: none) */
    Py_ssize_t frac_len;
} Number;

static inline int is_digit(char c) { return c >= '0' && c <= '9'; }

/* The value of eight ASCII digits (the first in the lowest byte): pairs, then quads, then all. */
static inline uint64_t eight_value(uint64_t v) {
    v = (v & 0x0F0F0F0F0F0F0F0FULL) * 2561 >> 8;             /* 10 * even byte + odd byte */
    v = (v & 0x00FF00FF00FF00FFULL) * 6553601 >> 16;          /* 100 * pair + next pair */
    return (v & 0x0000FFFF0000FFFFULL) * 42949672960001ULL >> 32; /* 10^4 * quad + next quad */
}

/* How many of the eight bytes of `v` (the first in the lowest byte) are digits before the
 * first that is not: 0..8. */
static inline int leading_digits(uint64_t v) {
    uint64_t high = (v & 0xF0F0F0F0F0F0F0F0ULL) ^ 0x3030303030303030ULL;                  /* not 0x3_ */
    uint64_t over = ((v + 0x0606060606060606ULL) & 0xF0F0F0F0F0F0F0F0ULL) ^ 0x3030303030303030ULL; /* past '9' */
    uint64_t bad = ~zero_bytes(high | over) & HIGHS; /* exact up to the first non-digit */
    return bad ? __builtin_ctzll(bad) >> 3 : 8;
}

/* The value of the first k (< 8) digits of `v`: shifted up, the bytes below them are zero
 * and read as leading zeros. */
static inline uint64_t first_digits(uint64_t v, int k) { return eight_value(v << (8 * (8 - k))); }

/* The end of a run of digits at p, eight bytes at a time (byte by byte in the last seven). */
static inline const char *digits_end(const char *p, const char *end) {
    while (end - p >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        int k = leading_digits(v);
        p += k;
        if (k < 8) return p;
    }
    while (p < end && is_digit(*p)) p++;
    return p;
}

/* The value of n <= 19 digits (below 10^19: no overflow in 64 bits). */
static inline uint64_t digits_value(const char *p, Py_ssize_t n) {
    uint64_t mag = 0;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        mag = mag * 100000000ULL + eight_value(v);
    }
    for (; n > 0; n--, p++) mag = mag * 10 + (unsigned)(*p - '0');
    return mag;
}

static int read_number(Scan *s, Number *num) {
    const char *p = s->p, *start = s->p, *end = s->end;
    memset(num, 0, sizeof(*num));
    if (p < end && *p == '-') {
        num->neg = 1;
        p++;
    }
    if (p >= end || !is_digit(*p)) return -1;
    const char *d0 = p;
    int short_run = 0;
    if (*p == '0') {
        p++;
    } else if (end - p >= 8) { /* up to seven digits (most numbers): read in one go */
        uint64_t v;
        memcpy(&v, p, 8);
        int k = leading_digits(v);
        if (k < 8) {
            num->mag = first_digits(v, k);
            p += k;
            short_run = 1;
        } else {
            p = digits_end(p, end);
        }
    } else {
        p = digits_end(p, end);
    }
    Py_ssize_t n = p - d0;
    if (!short_run) {
        if (n > 19) num->long_int = 1;
        else num->mag = digits_value(d0, n);
    }
    int is_int = 1;
    if (p < end && *p == '.') {
        is_int = 0;
        p++;
        if (p >= end || !is_digit(*p)) return -1;
        num->frac = p;
        p = digits_end(p, end);
        num->frac_len = p - num->frac;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        is_int = 0;
        num->has_exp = 1;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || !is_digit(*p)) return -1;
        p = digits_end(p, end);
    }
    num->sp.start = start - s->base;
    num->sp.len = p - start;
    num->is_int = is_int;
    if (is_int) {
        uint64_t mag = num->mag;
        if (num->long_int || (!num->neg && mag > (uint64_t)INT64_MAX) || (num->neg && mag > (uint64_t)INT64_MAX + 1)) {
            num->overflow = 1;
        } else {
            num->v = num->neg ? (int64_t)(0 - mag) : (int64_t)mag;
        }
    }
    s->p = p;
    return 0;
}

/* A time in µs -> integer ns: the first three fraction digits, rounded half up on the
 * fourth (away from zero for negative times); null past Int64; -1 (the Python path
 * decides) for exponents and for values at the very edge where float rounding matters. */
static int number_ns(const Scan *s, const Number *num, int64_t *out) {
    if (num->has_exp) return -1;
    int64_t sign = num->neg ? -1 : 1;
    uint64_t ip = num->mag;
    if (num->long_int || ip >= (uint64_t)MAX_US) {
        if (num->frac && !num->long_int && ip >= (uint64_t)MAX_US - 2 && ip <= (uint64_t)MAX_US + 2) return -1;
        *out = INT_NULL;
        return 0;
    }
    int64_t frac = 0, bump = 0;
    if (num->frac) {
        const char *p = num->frac;
        for (int i = 0; i < 3; i++) frac = frac * 10 + (i < num->frac_len ? p[i] - '0' : 0);
        if (num->frac_len > 3 && p[3] >= '5') bump = sign;
        if (ip >= (uint64_t)MAX_US - 2) return -1;
    }
    *out = sign * ((int64_t)ip * 1000 + frac) + bump;
    return 0;
}

/* An object's key and the colon after it, then the value's first byte; -1 when the text
 * is not that (or, with `plain`, when the key is written with escapes). */
static int read_key(Scan *s, Span *key, int plain) {
    int esc;
    if (s->p >= s->end || *s->p != '"' || read_string(s, key, &esc) < 0 || (plain && esc)) return -1;
    ws(s);
    if (s->p >= s->end || *s->p != ':') return -1;
    s->p++;
    ws(s);
    return s->p < s->end ? 0 : -1;
}

/* After a member or an item: 1 when a comma says another follows, 0 when `close` ends the
 * container, -1 otherwise. */
static int next_member(Scan *s, char close) {
    ws(s);
    if (s->p >= s->end) return -1;
    if (*s->p == ',') {
        s->p++;
        ws(s);
        return 1;
    }
    if (*s->p == close) {
        s->p++;
        return 0;
    }
    return -1;
}

/* The common integer, read in one step: 1 to 7 digits, no sign, not followed by a
 * fraction or an exponent. Its value with s->p moved past it, or -1 with nothing read
 * (read_number then decides, leading zeros included). */
static inline int64_t short_uint(Scan *s) {
    const char *p = s->p;
    if (s->end - p < 8) return -1;
    uint64_t v;
    memcpy(&v, p, 8);
    int k = leading_digits(v);
    if (k == 0 || k == 8 || (k > 1 && *p == '0')) return -1;
    char c = p[k];
    if (c == '.' || c == 'e' || c == 'E') return -1;
    s->p = p + k;
    return (int64_t)first_digits(v, k);
}

static int skip_value(Scan *s, int depth);

static int skip_container(Scan *s, int depth) {
    char open = *s->p, close = open == '{' ? '}' : ']';
    if (depth > MAX_DEPTH) return -1;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == close) {
        s->p++;
        return 0;
    }
    for (;;) {
        Span k;
        if (open == '{' && read_key(s, &k, 0) < 0) return -1;
        if (skip_value(s, depth + 1) < 0) return -1;
        int more = next_member(s, close);
        if (more <= 0) return more;
    }
}

static int literal(Scan *s, const char *word, Py_ssize_t n) {
    if (s->end - s->p < n || memcmp(s->p, word, n) != 0) return -1;
    s->p += n;
    return 0;
}

static int skip_value(Scan *s, int depth) {
    if (s->p >= s->end) return -1;
    char c = *s->p;
    if (c == '{' || c == '[') return skip_container(s, depth);
    if (c == '"') {
        Span sp;
        int esc;
        return read_string(s, &sp, &esc);
    }
    if (c == 't') return literal(s, "true", 4);
    if (c == 'f') return literal(s, "false", 5);
    if (c == 'n') return literal(s, "null", 4);
    if (short_uint(s) >= 0) return 0;
    Number num;
    return read_number(s, &num);
}

static inline int key_is(const Span *k, const char *base, const char *word, Py_ssize_t n) {
    return k->len == n && memcmp(base + k->start, word, n) == 0;
}

/* pid / tid / id: an integer, a string or another number; null reads as absent. */
static int read_scalar(Scan *s, Scalar *out) {
    memset(out, 0, sizeof(*out));
    if (s->p >= s->end) return -1;
    char c = *s->p;
    if (c == '"') {
        int esc;
        if (read_string(s, &out->sp, &esc) < 0) return -1;
        out->k = V_STR;
        out->esc = (unsigned char)esc;
        return 0;
    }
    if (c == 'n') return literal(s, "null", 4);
    if (c == '-' || (c >= '0' && c <= '9')) {
        int64_t small = short_uint(s);
        if (small >= 0) {
            out->k = V_INT;
            out->v = small;
            return 0;
        }
        Number num;
        if (read_number(s, &num) < 0) return -1;
        if (num.is_int && !num.overflow) {
            out->k = V_INT;
            out->v = num.v;
        } else {
            out->k = V_NUM;
            out->sp = num.sp;
        }
        return 0;
    }
    return -1; /* true/false, objects, arrays: the Python path counts them */
}

static int read_time(Scan *s, int64_t *out) {
    if (s->p >= s->end) return -1;
    if (*s->p == 'n') {
        *out = INT_NULL;
        return literal(s, "null", 4);
    }
    Number num;
    if (read_number(s, &num) < 0) return -1;
    return number_ns(s, &num, out);
}

static Entry *new_entry(Scan *s, int32_t key) {
    if (s->nent == s->capent) {
        Py_ssize_t cap = s->capent ? s->capent * 2 : 4096;
        Entry *ent = realloc(s->ent, sizeof(Entry) * cap);
        if (!ent) {
            s->nomem = 1;
            return NULL;
        }
        s->ent = ent;
        s->capent = cap;
    }
    Entry *e = &s->ent[s->nent++];
    memset(e, 0, sizeof(*e));
    e->key = key;
    return e;
}

static inline unsigned key_hash(const char *k, Py_ssize_t n) {
    if (n == 0) return 0;
    return ((unsigned)n * 131u + (unsigned char)k[0] * 31u + (unsigned char)k[n - 1] * 7u +
            (unsigned char)k[n / 2]) & (KEY_SLOTS - 1);
}

/* The text of args key i (typed keys, then shapes) and its length. */
static inline const char *key_word(const Scan *s, int i, Py_ssize_t *len) {
    *len = i < s->nargs ? s->arg_len[i] : s->shape_len[i - s->nargs];
    return i < s->nargs ? s->arg_key[i] : s->shape_key[i - s->nargs];
}

/* The args key's index: a typed key (< nargs), a shape key (nargs + i), or -1. */
static inline int find_key(const Scan *s, const char *k, Py_ssize_t n) {
    for (unsigned j = key_hash(k, n);; j = (j + 1) & (KEY_SLOTS - 1)) {
        int slot = s->key_slot[j];
        if (!slot) return -1;
        Py_ssize_t len;
        const char *word = key_word(s, slot - 1, &len);
        if (len == n && memcmp(word, k, (size_t)n) == 0) return slot - 1;
    }
}

/* Fill the lookup table; a key listed twice keeps its first index (as a scan in order would). */
static void index_keys(Scan *s) {
    memset(s->key_slot, 0, sizeof(s->key_slot));
    for (int i = 0; i < s->nargs + N_SHAPES; i++) {
        Py_ssize_t len;
        const char *word = key_word(s, i, &len);
        if (find_key(s, word, len) >= 0) continue;
        unsigned j = key_hash(word, len);
        while (s->key_slot[j]) j = (j + 1) & (KEY_SLOTS - 1);
        s->key_slot[j] = (unsigned char)(i + 1);
    }
}

static int hex_text(const char *p, Py_ssize_t n) {
    if (n < 3 || p[0] != '0' || (p[1] != 'x' && p[1] != 'X')) return 0;
    for (Py_ssize_t i = 2; i < n; i++)
        if (hexval(p[i]) < 0) return 0;
    return 1;
}

/* Whether a key other than the typed and shape keys was already seen in this `args`
 * (entries first..nent-1). */
static int rest_seen(const Scan *s, Py_ssize_t first, const Span *k) {
    for (Py_ssize_t j = first; j < s->nent; j++) {
        const Entry *en = &s->ent[j];
        if (en->key == REST_KEY && en->kl == k->len + 2 && memcmp(s->base + en->ks + 1, s->base + k->start, k->len) == 0)
            return 1;
    }
    return 0;
}

/* An `args` object: an entry per member. A key given twice is left to the Python path
 * (which keeps the last value, in the first one's place), and so is an object with more
 * than MAX_REST_KEYS other keys (checking each against the others is quadratic: 100,000
 * keys took 23 s here, 0.9 s there). */
static int read_args(Scan *s) {
    const char *base = s->base;
    Py_ssize_t first = s->nent;
    int rest = 0;
    uint64_t seen[2] = {0, 0}; /* typed and shape keys met so far */
    s->p++; /* { */
    ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        return 0;
    }
    for (;;) {
        Span k;
        if (read_key(s, &k, 1) < 0) return -1;
        if (k.len > INT32_MAX - 2) return -1;
        int found = find_key(s, base + k.start, k.len);
        int hit = found < s->nargs ? found : -1;
        int shape = found >= s->nargs && found < s->nargs + N_SHAPES ? found - s->nargs : -1;
        if (found >= 0) {
            uint64_t bit = 1ULL << (found & 63);
            if (seen[found >> 6] & bit) return -1;
            seen[found >> 6] |= bit;
        } else if (++rest > MAX_REST_KEYS || rest_seen(s, first, &k)) {
            return -1;
        }
        const char *v0 = s->p;
        Py_ssize_t at = s->nent;
        if (hit >= 0) {
            Entry *en = new_entry(s, hit);
            if (!en) return -1;
            int64_t *val = en->v;
            char c = *s->p;
            if (c == 'n') {
                if (literal(s, "null", 4) < 0) return -1;
                en->null = 1;
            } else if (s->arg_kind[hit] == K_INT && c == '"') {
                /* ROCm writes some integers as hex text ("0x0"), which no integer parse
                 * takes: null, as in the Python path; any other text is left to it */
                Span sp;
                int e2;
                if (read_string(s, &sp, &e2) < 0 || e2 || !hex_text(base + sp.start, sp.len)) return -1;
                en->null = 1;
            } else if (s->arg_kind[hit] == K_INT) {
                Number num;
                if (c != '-' && (c < '0' || c > '9')) return -1;
                int64_t small = short_uint(s);
                if (small >= 0) {
                    val[0] = small;
                } else {
                    if (read_number(s, &num) < 0 || !num.is_int || num.overflow || num.v == INT_NULL) return -1;
                    val[0] = num.v;
                }
            } else if (s->arg_kind[hit] == K_FLOAT) {
                Number num;
                char tmp[64];
                if (c != '-' && (c < '0' || c > '9')) return -1;
                if (read_number(s, &num) < 0 || num.sp.len >= (Py_ssize_t)sizeof(tmp)) return -1;
                memcpy(tmp, base + num.sp.start, num.sp.len);
                tmp[num.sp.len] = 0;
                double d = strtod(tmp, NULL);
                if (!isfinite(d)) return -1;
                memcpy(&val[0], &d, sizeof(d));
            } else if (s->arg_kind[hit] == K_STR) {
                Span sp;
                int e2;
                if (c != '"' || read_string(s, &sp, &e2) < 0) return -1;
                val[0] = sp.start;
                val[1] = sp.len;
                en->esc = (unsigned char)e2;
            } else { /* K_LIST: exactly three integers */
                if (c != '[') return -1;
                s->p++;
                for (int i = 0; i < 3; i++) {
                    Number num;
                    ws(s);
                    if (s->p >= s->end || (*s->p != '-' && (*s->p < '0' || *s->p > '9'))) return -1;
                    if (read_number(s, &num) < 0 || !num.is_int || num.overflow || num.v == INT_NULL) return -1;
                    val[i] = num.v;
                    ws(s);
                    if (s->p >= s->end || *s->p != (i < 2 ? ',' : ']')) return -1;
                    s->p++;
                }
            }
        } else if (shape >= 0) {
            if (skip_value(s, 4) < 0) return -1;
            Entry *en = new_entry(s, s->nargs + shape);
            if (!en) return -1;
            en->v[0] = v0 - base;
            en->v[1] = s->p - v0;
        } else {
            if (skip_value(s, 4) < 0) return -1;
            if (!new_entry(s, REST_KEY)) return -1;
        }
        if (s->p - v0 > INT32_MAX) return -1;
        Entry *en = &s->ent[at];
        en->ks = k.start - 1;
        en->kl = (int32_t)k.len + 2;
        en->vs = v0 - base;
        en->vl = (int32_t)(s->p - v0);
        int more = next_member(s, '}');
        if (more <= 0) return more;
    }
}

static int grow(Scan *s) {
    Py_ssize_t cap = s->cap ? s->cap * 2 : 1024;
    Event *ev = realloc(s->ev, sizeof(Event) * cap);
    if (!ev) return -1;
    s->ev = ev;
    s->cap = cap;
    return 0;
}

/* An event's keys: the string fields (F_*), then the rest; EK_OTHER is skipped. */
enum { EK_PID = N_STRF, EK_TID, EK_ID, EK_TS, EK_DUR, EK_ARGS, EK_OTHER, EK_READ = -2 };

static int event_key(const Span *k, const char *base) {
    if (key_is(k, base, "ph", 2)) return F_PH;
    if (key_is(k, base, "cat", 3)) return F_CAT;
    if (key_is(k, base, "name", 4)) return F_NAME;
    if (key_is(k, base, "bp", 2)) return F_BP;
    if (key_is(k, base, "s", 1)) return F_S;
    if (key_is(k, base, "pid", 3)) return EK_PID;
    if (key_is(k, base, "tid", 3)) return EK_TID;
    if (key_is(k, base, "id", 2)) return EK_ID;
    if (key_is(k, base, "ts", 2)) return EK_TS;
    if (key_is(k, base, "dur", 3)) return EK_DUR;
    if (key_is(k, base, "args", 4)) return EK_ARGS;
    return EK_OTHER;
}

/* The common event keys read straight from the bytes at s->p (the opening quote): the key
 * with its quotes, the colon and the whitespace around it, as `read_key` would. EK_READ
 * (nothing consumed) for any other key, which `read_key` then reads; -1 when no value
 * follows the colon. */
static inline int known_key(Scan *s) {
    const char *p = s->p;
    if (s->end - p < 8 || *p != '"') return EK_READ;
    uint64_t v;
    memcpy(&v, p, 8);
    int key = EK_READ, n = 0;
#define KEY(text, id) /* text: the key with its quotes, at most 7 bytes */                \
    do {                                                                                   \
        const int len = (int)sizeof(text) - 1;                                             \
        uint64_t want = 0;                                                                 \
        memcpy(&want, text, len);                                                          \
        if ((v & ((1ULL << (8 * len)) - 1)) == want) {                                     \
            key = id;                                                                      \
            n = len;                                                                       \
        }                                                                                  \
    } while (0)
    switch (p[1]) {
    case 'p': KEY("\"ph\"", F_PH); if (!n) KEY("\"pid\"", EK_PID); break;
    case 't': KEY("\"ts\"", EK_TS); if (!n) KEY("\"tid\"", EK_TID); break;
    case 'c': KEY("\"cat\"", F_CAT); break;
    case 'n': KEY("\"name\"", F_NAME); break;
    case 'd': KEY("\"dur\"", EK_DUR); break;
    case 'a': KEY("\"args\"", EK_ARGS); break;
    case 'i': KEY("\"id\"", EK_ID); break;
    case 'b': KEY("\"bp\"", F_BP); break;
    case 's': KEY("\"s\"", F_S); break;
    default: break;
    }
#undef KEY
    if (!n) return EK_READ;
    s->p = p + n;
    ws(s);
    if (s->p >= s->end || *s->p != ':') return -1;
    s->p++;
    ws(s);
    return s->p < s->end ? key : -1;
}

static int read_event(Scan *s) {
    if (s->n == s->cap && grow(s) < 0) {
        s->nomem = 1;
        return -1;
    }
    Py_ssize_t row = s->n;
    Event *e = &s->ev[row];
    memset(e, 0, sizeof(*e));
    for (int i = 0; i < N_STRF; i++) e->str[i] = -1;
    e->ts = e->dur = INT_NULL;
    e->args.len = -1;
    e->a0 = s->nent;
    const char *base = s->base;
    if (s->p >= s->end || *s->p != '{') return -1;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == '}') {
        s->p++;
        s->n++;
        return 0;
    }
    int had_args = 0;
    for (;;) {
        int key = known_key(s);
        if (key == EK_READ) {
            Span k;
            if (read_key(s, &k, 1) < 0) return -1;
            key = event_key(&k, base);
        } else if (key < 0) {
            return -1;
        }
        int field = key < N_STRF ? key : -1;
        if (field >= 0) {
            Span sp;
            int e2;
            if (*s->p != '"' || read_string(s, &sp, &e2) < 0) return -1;
            int32_t id = intern(&s->strs[field], base, sp.start, sp.len, e2);
            if (id < 0) {
                s->nomem = 1;
                return -1;
            }
            e->str[field] = id;
        } else if (key == EK_PID) {
            if (read_scalar(s, &e->pid) < 0) return -1;
        } else if (key == EK_TID) {
            if (read_scalar(s, &e->tid) < 0) return -1;
        } else if (key == EK_ID) {
            if (read_scalar(s, &e->id) < 0) return -1;
        } else if (key == EK_TS) {
            if (read_time(s, &e->ts) < 0) return -1;
        } else if (key == EK_DUR) {
            if (read_time(s, &e->dur) < 0) return -1;
        } else if (key == EK_ARGS) {
            if (*s->p != '{' || had_args) return -1;
            had_args = 1;
            const char *a0 = s->p;
            if (read_args(s) < 0) return -1;
            e = &s->ev[row];
            e->args.start = a0 - base;
            e->args.len = s->p - a0;
            e->an = (int32_t)(s->nent - e->a0);
        } else if (skip_value(s, 3) < 0) {
            return -1;
        }
        int more = next_member(s, '}');
        if (more < 0) return -1;
        if (more == 0) {
            s->n++;
            return 0;
        }
    }
}

/* The whole piece: `[` events `]`, or (bare) the events alone; 0 ok, -1 not the common
 * shape (or out of memory). */
static int read_piece(Scan *s, int bare) {
    ws(s);
    if (!bare) {
        if (s->p >= s->end || *s->p != '[') return -1;
        s->p++;
        ws(s);
    }
    char close = bare ? 0 : ']';
    if (bare ? s->p == s->end : (s->p < s->end && *s->p == ']')) {
        if (!bare) s->p++;
    } else {
        for (;;) {
            if (read_event(s) < 0) return -1;
            ws(s);
            if (s->p >= s->end) {
                if (bare) break;
                return -1;
            }
            if (*s->p == ',') {
                s->p++;
                ws(s);
                continue;
            }
            if (close && *s->p == close) {
                s->p++;
                break;
            }
            return -1;
        }
    }
    ws(s);
    return s->p == s->end ? 0 : -1;
}

/* ---- phase 2: Python objects ------------------------------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t len, cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t more) {
    if (b->len + more <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) return -1;
    b->data = d;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const char *s, Py_ssize_t n) {
    if (n == 0) return 0;
    if (buf_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}

/* ---- column buffers ----------------------------------------------------------------------
 * A column's buffer is malloc'd memory with a reference count (`Mem`), held by the Python
 * object the batch lists (`Buffer`, read-only, with the buffer protocol) and by every Arrow
 * array made of it (`arrow_column`). Polars takes the arrays over without a copy and may let
 * them go on any thread, without the GIL: the count is atomic and nothing else is touched. */

typedef struct {
    long refs;
    char *data;
    Py_ssize_t len;
} Mem;

/* `data` (malloc'd, `len` bytes; NULL when empty) taken over: freed with the Mem, also on failure. */
static Mem *mem_take(void *data, Py_ssize_t len) {
    if (!data) data = malloc(1); /* never a NULL buffer, even an empty one */
    Mem *m = data ? malloc(sizeof *m) : NULL;
    if (!m) {
        free(data);
        PyErr_NoMemory();
        return NULL;
    }
    m->refs = 1;
    m->data = data;
    m->len = len;
    return m;
}

static Mem *mem_new(Py_ssize_t len) { return mem_take(len > 0 ? malloc(len) : NULL, len); }

static void mem_ref(Mem *m) { __atomic_add_fetch(&m->refs, 1, __ATOMIC_RELAXED); }

static void mem_unref(Mem *m) {
    if (m && __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        free(m->data);
        free(m);
    }
}

typedef struct {
    PyObject_HEAD
    Mem *mem;
} BufferObject;

static void buffer_dealloc(BufferObject *self) {
    mem_unref(self->mem);
    PyObject_Free(self);
}

static int buffer_get(BufferObject *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->mem->data, self->mem->len, 1, flags);
}

static Py_ssize_t buffer_len(BufferObject *self) { return self->mem->len; }

static PyBufferProcs buffer_procs = {(getbufferproc)buffer_get, NULL};
static PySequenceMethods buffer_sequence = {.sq_length = (lenfunc)buffer_len};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracekit.native._scan.Buffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_dealloc = (destructor)buffer_dealloc,
    .tp_as_sequence = &buffer_sequence,
    .tp_as_buffer = &buffer_procs,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A column buffer of a scanned batch (read-only bytes).",
};

/* A Buffer holding `m` (taken over, also on failure; NULL: NULL). */
static PyObject *buffer_of(Mem *m) {
    if (!m) return NULL;
    BufferObject *b = PyObject_New(BufferObject, &BufferType);
    if (!b) {
        mem_unref(m);
        return NULL;
    }
    b->mem = m;
    return (PyObject *)b;
}

static int put_utf8(Buf *b, uint32_t cp) {
    char t[4];
    Py_ssize_t n;
    if (cp < 0x80) {
        t[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        t[0] = (char)(0xC0 | (cp >> 6));
        t[1] = (char)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        t[0] = (char)(0xE0 | (cp >> 12));
        t[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[2] = (char)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        t[0] = (char)(0xF0 | (cp >> 18));
        t[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
        t[3] = (char)(0x80 | (cp & 0x3F));
        n = 4;
    }
    return buf_put(b, t, n);
}

/* JSON string contents (already checked by read_string) -> UTF-8; -1 on a lone surrogate. */
static int unescape(Buf *b, const char *p, Py_ssize_t n) {
    const char *e = p + n;
    while (p < e) {
        const char *q = p;
        while (q < e && *q != '\\') q++;
        if (buf_put(b, p, q - p) < 0) return -1;
        if (q >= e) break;
        char c = q[1];
        p = q + 2;
        if (c != 'u') {
            char out = c == 'b' ? '\b' : c == 'f' ? '\f' : c == 'n' ? '\n' : c == 'r' ? '\r' : c == 't' ? '\t' : c;
            if (buf_put(b, &out, 1) < 0) return -1;
            continue;
        }
        uint32_t cp = 0;
        for (int i = 0; i < 4; i++) cp = cp * 16 + (uint32_t)hexval(p[i]);
        p += 4;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (e - p < 6 || p[0] != '\\' || p[1] != 'u') return -1;
            uint32_t lo = 0;
            for (int i = 2; i < 6; i++) lo = lo * 16 + (uint32_t)hexval(p[i]);
            if (lo < 0xDC00 || lo > 0xDFFF) return -1;
            p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return -1;
        }
        if (put_utf8(b, cp) < 0) return -1;
    }
    return 0;
}

static PyObject *span_str(const char *base, Span sp, int esc) {
    if (!esc) return PyUnicode_DecodeUTF8(base + sp.start, sp.len, "strict");
    Buf b = {0};
    if (unescape(&b, base + sp.start, sp.len) < 0) {
        free(b.data);
        PyErr_SetString(PyExc_ValueError, "unscannable text"); /* the Python path judges it */
        return NULL;
    }
    PyObject *out = PyUnicode_DecodeUTF8(b.data ? b.data : "", b.len, "strict");
    free(b.data);
    return out;
}

/* (name, kind, (buffers...)) */
static PyObject *column(const char *name, const char *kind, PyObject *bufs) {
    if (!bufs) return NULL;
    PyObject *out = Py_BuildValue("(ssN)", name, kind, bufs);
    return out;
}

/* An Int64 (or, kind "f64", Float64) column of n values that the caller writes through
 * *values before handing the column on (no Python code sees it before). */
static PyObject *number_column(const char *name, const char *kind, Py_ssize_t n, int64_t **values) {
    Mem *m = mem_new(n * 8);
    *values = m ? (int64_t *)m->data : NULL;
    PyObject *buf = buffer_of(m);
    return column(name, kind, buf ? Py_BuildValue("(N)", buf) : NULL);
}

/* A text column from `n` + 1 int64 offsets and the data (both malloc'd, taken over, also
 * on failure). */
static PyObject *text_column(const char *name, int64_t *offsets, Py_ssize_t n, char *data, Py_ssize_t len) {
    PyObject *off = buffer_of(mem_take(offsets, (n + 1) * 8));
    PyObject *dat = buffer_of(mem_take(data, len));
    if (!off || !dat) {
        Py_XDECREF(off);
        Py_XDECREF(dat);
        return NULL;
    }
    return column(name, "utf8", Py_BuildValue("(NN)", off, dat));
}

/* A text column from a Buf filled row by row (`bad`: a row could not be written); the Buf
 * and the offsets are taken over. */
static PyObject *finish_text(const char *name, Buf *b, int64_t *offs, Py_ssize_t n, int bad) {
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "unscannable text"); /* the Python path judges it */
        free(b->data);
        free(offs);
        return NULL;
    }
    char *data = b->data;
    b->data = NULL;
    return text_column(name, offs, n, data, b->len);
}

typedef struct {
    PyObject *key;   /* the group's name (a str, borrowed from the config) */
    Py_ssize_t n;
    Py_ssize_t *rows;
} Group;

static char STR_NULL_TEXT[] = "\x1e";

/* pid / tid / id: Int64 `<f>_i` when every value is an integer, else text. */
static PyObject *scalar_column(Scan *s, const char *f, size_t off, Group *g) {
    char name[16];
    int all_int = 1;
    for (Py_ssize_t i = 0; i < g->n; i++) {
        const Scalar *v = (const Scalar *)((const char *)&s->ev[g->rows[i]] + off);
        if (v->k != V_INT) {
            all_int = 0;
            break;
        }
    }
    if (all_int) {
        int64_t *vals;
        snprintf(name, sizeof(name), "%s_i", f);
        PyObject *out = number_column(name, "i64", g->n, &vals);
        if (out)
            for (Py_ssize_t i = 0; i < g->n; i++)
                vals[i] = ((const Scalar *)((const char *)&s->ev[g->rows[i]] + off))->v;
        return out;
    }
    Buf b = {0};
    int64_t *offs = malloc(sizeof(int64_t) * (g->n + 1));
    if (!offs) return PyErr_NoMemory();
    offs[0] = 0;
    int bad = 0;
    for (Py_ssize_t i = 0; i < g->n && !bad; i++) {
        const Scalar *v = (const Scalar *)((const char *)&s->ev[g->rows[i]] + off);
        char tmp[32];
        if (v->k == V_INT) {
            int n = snprintf(tmp, sizeof(tmp), "%lld", (long long)v->v);
            bad = buf_put(&b, tmp, n) < 0;
        } else if (v->k == V_STR) {
            bad = v->esc ? unescape(&b, s->base + v->sp.start, v->sp.len) < 0
                         : buf_put(&b, s->base + v->sp.start, v->sp.len) < 0;
        } else if (v->k == V_NUM) {
            bad = buf_put(&b, s->base + v->sp.start, v->sp.len) < 0;
        } else {
            bad = buf_put(&b, STR_NULL_TEXT, 1) < 0;
        }
        offs[i + 1] = b.len;
    }
    return finish_text(f, &b, offs, g->n, bad);
}

/* Distinct texts in first-appearance order: `index` maps text -> code, `values` lists them. */
typedef struct {
    PyObject *values, *index;
} Dict;

/* The code of interned string `id` of `t` (-1: absent, read as ""), added when new. */
static int64_t dict_code(Dict *d, Intern *t, const char *base, int32_t id) {
    PyObject *text = (id < 0) ? PyUnicode_FromStringAndSize("", 0) : span_str(base, t->items[id], t->esc[id]);
    if (!text) return -1;
    PyObject *have = PyDict_GetItemWithError(d->index, text);
    int64_t code;
    if (have) {
        code = PyLong_AsLongLong(have);
    } else if (PyErr_Occurred()) {
        code = -1;
    } else {
        code = PyList_GET_SIZE(d->values);
        PyObject *c = PyLong_FromLongLong(code);
        if (!c || PyDict_SetItem(d->index, text, c) < 0 || PyList_Append(d->values, text) < 0) code = -1;
        Py_XDECREF(c);
    }
    Py_DECREF(text);
    return code;
}

/* Codes of `field` for the given rows, into a dictionary in first-appearance order. `memo`
 * (t->n + 1 slots, -1 filled) caches each interned id's code. */
static int codes_of(Scan *s, int field, const Py_ssize_t *rows, Py_ssize_t n, Dict *d, int64_t *memo, int64_t *out) {
    Intern *t = &s->strs[field];
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t r = rows ? rows[i] : i;
        int32_t id = s->ev[r].str[field];
        int64_t *m = &memo[id + 1];
        if (*m < 0) {
            *m = dict_code(d, t, s->base, id);
            if (*m < 0) return -1;
        }
        if (out) out[i] = *m;
    }
    return 0;
}

static int dict_init(Dict *d) {
    d->values = PyList_New(0);
    d->index = PyDict_New();
    return d->values && d->index ? 0 : -1;
}

static void dict_clear(Dict *d) {
    Py_XDECREF(d->values);
    Py_XDECREF(d->index);
}

/* name / bp / s: codes into the group's own dictionary (first appearance order). */
static PyObject *code_column(Scan *s, int field, const char *f, Group *g, PyObject *group_dicts) {
    Intern *t = &s->strs[field];
    int64_t *memo = malloc(sizeof(int64_t) * (t->n + 1)), *codes;
    Dict d = {0};
    char name[16];
    snprintf(name, sizeof(name), "%s_c", f);
    PyObject *out = number_column(name, "i64", g->n, &codes);
    if (!out || !memo || dict_init(&d) < 0) goto fail;
    memset(memo, 0xff, sizeof(int64_t) * (t->n + 1));
    if (codes_of(s, field, g->rows, g->n, &d, memo, codes) < 0 || PyDict_SetItemString(group_dicts, f, d.values) < 0)
        goto fail;
    goto done;
fail:
    Py_CLEAR(out);
    if (!PyErr_Occurred()) PyErr_NoMemory();
done:
    free(memo);
    dict_clear(&d);
    return out;
}

static PyObject *time_column(Scan *s, const char *name, int dur, Group *g) {
    int64_t *vals;
    PyObject *out = number_column(name, "i64", g->n, &vals);
    if (out)
        for (Py_ssize_t i = 0; i < g->n; i++) vals[i] = dur ? s->ev[g->rows[i]].dur : s->ev[g->rows[i]].ts;
    return out;
}

static const char NO_ARGS[] = "{\"\\u001e\":0}";

/* A text column of raw spans of the text, copied as written; a row whose span has
 * len < 0 takes `dflt` instead. */
static PyObject *span_column(const char *base, const char *name, const Span *spans, Py_ssize_t n, const char *dflt) {
    Py_ssize_t total = 0, dlen = (Py_ssize_t)strlen(dflt);
    for (Py_ssize_t i = 0; i < n; i++) total += spans[i].len >= 0 ? spans[i].len : dlen;
    int64_t *o = malloc((n + 1) * 8);
    char *d = malloc(total > 0 ? total : 1);
    if (!o || !d) {
        free(o);
        free(d);
        return PyErr_NoMemory();
    }
    int64_t pos = 0;
    o[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *from = spans[i].len >= 0 ? base + spans[i].start : dflt;
        Py_ssize_t len = spans[i].len >= 0 ? spans[i].len : dlen;
        memcpy(d + pos, from, len);
        pos += len;
        o[i + 1] = pos;
    }
    return text_column(name, o, n, d, total);
}

/* `args` less the members that became this group's columns: `{"key":value,...}` with
 * the keys and values as written, in their order (NO_ARGS when none is left). Dropped:
 * the family's typed keys (`family`: a bit per typed key) whose value was read (not
 * null), and with `shapes` the shape keys. As `tracekit.loader.args.remainders` writes it. */
static PyObject *rest_column(Scan *s, Group *g, uint64_t family, int shapes) {
    Buf b = {0};
    int64_t *offs = malloc(sizeof(int64_t) * (g->n + 1));
    if (!offs) return PyErr_NoMemory();
    offs[0] = 0;
    int bad = 0;
    const char *base = s->base;
    for (Py_ssize_t i = 0; i < g->n && !bad; i++) {
        const Event *e = &s->ev[g->rows[i]];
        int none = 1;
        for (int32_t j = 0; j < e->an && !bad; j++) {
            const Entry *en = &s->ent[e->a0 + j];
            int drop = en->key < s->nargs ? (int)((family >> en->key) & 1) && !en->null : en->key < REST_KEY && shapes;
            if (drop) continue;
            bad = buf_reserve(&b, (Py_ssize_t)en->kl + en->vl + 2) < 0;
            if (bad) break;
            b.data[b.len++] = none ? '{' : ',';
            memcpy(b.data + b.len, base + en->ks, en->kl);
            b.len += en->kl;
            b.data[b.len++] = ':';
            memcpy(b.data + b.len, base + en->vs, en->vl);
            b.len += en->vl;
            none = 0;
        }
        if (!bad) bad = none ? buf_put(&b, NO_ARGS, sizeof(NO_ARGS) - 1) < 0 : buf_put(&b, "}", 1) < 0;
        offs[i + 1] = b.len;
    }
    if (bad) {
        free(b.data);
        free(offs);
        return PyErr_NoMemory();
    }
    return finish_text("args", &b, offs, g->n, 0);
}

/* `args` as written (NO_ARGS when absent). */
static PyObject *args_column(Scan *s, Group *g) {
    Span *spans = malloc(sizeof(Span) * (g->n + 1));
    if (!spans) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < g->n; i++) spans[i] = s->ev[g->rows[i]].args;
    PyObject *out = span_column(s->base, "args", spans, g->n, NO_ARGS);
    free(spans);
    return out;
}

static int append_column(PyObject *cols, PyObject *col) {
    if (!col) return -1;
    int rc = PyList_Append(cols, col);
    Py_DECREF(col);
    return rc;
}

/* The typed args of a group, gathered in one pass over its rows' entries (a later
 * duplicate key overwrites, as in the Python path): for each key asked for, the entry of
 * each row (NULL: absent), and whether any row has the key at all. */
typedef struct {
    const Entry **at; /* nkeys * g->n */
    unsigned char *present;
} Gathered;

static int gather(const Scan *s, const Group *g, const int *keys, int nkeys, Gathered *out) {
    int slot[REST_KEY + 1];
    for (int i = 0; i <= REST_KEY; i++) slot[i] = -1;
    for (int k = 0; k < nkeys; k++) slot[keys[k]] = k;
    out->at = calloc((size_t)nkeys * g->n + 1, sizeof(Entry *));
    out->present = calloc(nkeys + 1, 1);
    if (!out->at || !out->present) return -1;
    for (Py_ssize_t i = 0; i < g->n; i++) {
        const Event *e = &s->ev[g->rows[i]];
        for (int32_t j = 0; j < e->an; j++) {
            const Entry *en = &s->ent[e->a0 + j];
            int k = slot[en->key];
            if (k >= 0) {
                out->at[(size_t)k * g->n + i] = en;
                out->present[k] = 1;
            }
        }
    }
    return 0;
}

static void gathered_free(Gathered *g) {
    free(g->at);
    free(g->present);
}

/* One args key's column(s): nulls are the markers the Python path writes. */
static int arg_columns(Scan *s, int a, const Entry **at, PyObject *colname, Group *g, PyObject *cols) {
    const char *name = PyUnicode_AsUTF8(colname);
    if (!name) return -1;
    int kind = s->arg_kind[a];
    if (kind == K_STR) {
        Buf b = {0};
        int64_t *offs = malloc(sizeof(int64_t) * (g->n + 1));
        if (!offs) return -1;
        offs[0] = 0;
        int bad = 0;
        for (Py_ssize_t i = 0; i < g->n && !bad; i++) {
            const Entry *en = at[i];
            if (en && !en->null) {
                const char *p = s->base + en->v[0];
                bad = en->esc ? unescape(&b, p, en->v[1]) < 0 : buf_put(&b, p, en->v[1]) < 0;
            } else {
                bad = buf_put(&b, STR_NULL_TEXT, 1) < 0;
            }
            offs[i + 1] = b.len;
        }
        return append_column(cols, finish_text(name, &b, offs, g->n, bad));
    }
    int parts = kind == K_LIST ? 3 : 1;
    int64_t null = INT_NULL;
    if (kind == K_FLOAT) {
        double nan = NAN;
        memcpy(&null, &nan, sizeof(nan));
    }
    for (int axis = 0; axis < parts; axis++) {
        int64_t *vals;
        char full[64];
        if (kind == K_LIST) snprintf(full, sizeof(full), "%s_%c", name, "xyz"[axis]);
        else snprintf(full, sizeof(full), "%s", name);
        PyObject *col = number_column(full, kind == K_FLOAT ? "f64" : "i64", g->n, &vals);
        if (col)
            for (Py_ssize_t i = 0; i < g->n; i++) vals[i] = (at[i] && !at[i]->null) ? at[i]->v[axis] : null;
        if (append_column(cols, col) < 0) return -1;
    }
    return 0;
}

static const char *SHAPE_COLS[N_SHAPES] = {"input_dims", "input_dims_old", "input_types", "input_strides",
                                           "concrete_inputs"};

/* A shape key's value as written ("" when absent). */
static PyObject *shape_column(Scan *s, const char *name, const Entry **at, Group *g) {
    Span *spans = malloc(sizeof(Span) * (g->n + 1));
    if (!spans) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < g->n; i++) {
        spans[i].start = at[i] ? at[i]->v[0] : 0;
        spans[i].len = at[i] ? at[i]->v[1] : -1;
    }
    PyObject *out = span_column(s->base, name, spans, g->n, "");
    free(spans);
    return out;
}

/* spec: (fields: tuple[str], with_ph: bool, with_args: bool, family: tuple[(arg index, column)], shapes: bool,
 *        rest: bool (`args` keeps only what did not become a column)) */
static PyObject *group_columns(Scan *s, Group *g, PyObject *spec, const int64_t *cat_codes,
                               const int64_t *ph_codes, PyObject *group_dicts) {
    PyObject *fields, *family;
    int with_ph, with_args, shapes, rest;
    if (!PyArg_ParseTuple(spec, "O!ppO!pp", &PyTuple_Type, &fields, &with_ph, &with_args, &PyTuple_Type, &family,
                          &shapes, &rest))
        return NULL;
    PyObject *cols = PyList_New(0);
    if (!cols) goto fail;
    /* eid, cat_c and (where the phase varies) ph_c: per row, from the whole piece's arrays */
    const char *idnames[3] = {"eid", "cat_c", "ph_c"};
    for (int c = 0; c < (with_ph ? 3 : 2); c++) {
        int64_t *vals;
        PyObject *col = number_column(idnames[c], "i64", g->n, &vals);
        if (col)
            for (Py_ssize_t i = 0; i < g->n; i++) {
                Py_ssize_t r = g->rows[i];
                vals[i] = c == 0 ? r : c == 1 ? cat_codes[r] : ph_codes[r];
            }
        if (append_column(cols, col) < 0) goto fail;
    }
    for (Py_ssize_t fi = 0; fi < PyTuple_GET_SIZE(fields); fi++) {
        const char *f = PyUnicode_AsUTF8(PyTuple_GET_ITEM(fields, fi));
        PyObject *c;
        if (!f) goto fail;
        if (!strcmp(f, "name")) c = code_column(s, F_NAME, f, g, group_dicts);
        else if (!strcmp(f, "bp")) c = code_column(s, F_BP, f, g, group_dicts);
        else if (!strcmp(f, "s")) c = code_column(s, F_S, f, g, group_dicts);
        else if (!strcmp(f, "pid")) c = scalar_column(s, f, offsetof(Event, pid), g);
        else if (!strcmp(f, "tid")) c = scalar_column(s, f, offsetof(Event, tid), g);
        else if (!strcmp(f, "id")) c = scalar_column(s, f, offsetof(Event, id), g);
        else if (!strcmp(f, "ts")) c = time_column(s, "ts_n", 0, g);
        else if (!strcmp(f, "dur")) c = time_column(s, "dur_n", 1, g);
        else {
            PyErr_Format(PyExc_KeyError, "unknown field %s", f);
            goto fail;
        }
        if (append_column(cols, c) < 0) goto fail;
    }
    if (with_args) {
        int keys[MAX_ARGS + N_SHAPES], nfam = 0;
        uint64_t bits = 0;
        PyObject *names[MAX_ARGS];
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(family) && nfam < MAX_ARGS; k++) {
            PyObject *item = PyTuple_GET_ITEM(family, k);
            int a = (int)PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
            if (a < 0 || a >= s->nargs) {
                PyErr_SetString(PyExc_KeyError, "args key index out of range");
                goto fail;
            }
            names[nfam] = PyTuple_GET_ITEM(item, 1);
            keys[nfam++] = a;
            bits |= 1ULL << a;
        }
        if (append_column(cols, rest ? rest_column(s, g, bits, shapes) : args_column(s, g)) < 0) goto fail;
        int nkeys = nfam;
        if (shapes)
            for (int k = 0; k < N_SHAPES; k++) keys[nkeys++] = s->nargs + k;
        Gathered ga = {0};
        if (gather(s, g, keys, nkeys, &ga) < 0) {
            gathered_free(&ga);
            goto fail;
        }
        int rc = 0;
        for (int k = 0; k < nfam && rc == 0; k++) /* a key never here: the projection fills nulls */
            if (ga.present[k]) rc = arg_columns(s, keys[k], ga.at + (size_t)k * g->n, names[k], g, cols);
        int any = 0;
        for (int k = nfam; k < nkeys; k++) any |= ga.present[k];
        for (int k = nfam; any && k < nkeys && rc == 0; k++)
            rc = append_column(cols, shape_column(s, SHAPE_COLS[k - nfam], ga.at + (size_t)k * g->n, g));
        gathered_free(&ga);
        if (rc < 0) goto fail;
    }
    return cols;
fail:
    if (!PyErr_Occurred()) PyErr_NoMemory();
    Py_XDECREF(cols);
    return NULL;
}

static void scan_free(Scan *s) {
    free(s->ev);
    free(s->ent);
    for (int i = 0; i < N_STRF; i++) intern_free(&s->strs[i]);
}

/* The group (an index into keys, added when new) of a group name. */
static int group_index(PyObject *keys, PyObject *key) {
    Py_ssize_t n = PyList_GET_SIZE(keys);
    for (Py_ssize_t i = 0; i < n; i++) {
        int eq = PyObject_RichCompareBool(PyList_GET_ITEM(keys, i), key, Py_EQ);
        if (eq < 0) return -1;
        if (eq) return (int)i;
    }
    if (PyList_Append(keys, key) < 0) return -1;
    return (int)n;
}

/* scan(piece, arg_keys, ph_groups, x_kinds, specs, bare=False) -> (n, ph_list, cat_list, [(key, n, cols, dicts)]) | None
 *
 * piece: `[` + events + `]` (any buffer); bare: the events alone, without the brackets.
 * arg_keys: tuple of (json key: bytes, kind: int) in column-index order.
 * ph_groups: dict ph -> group name ("x": complete events, grouped further by category; a
 *   phase not in it: "other"). x_kinds: dict category -> group name (default "ops").
 * specs: dict group name -> (fields, with_ph, with_args, family, shapes).
 * None: the piece is not in the common shape (the Python path reads it).
 */
static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer piece;
    PyObject *arg_keys, *ph_groups, *x_kinds, *specs;
    int bare = 0;
    if (!PyArg_ParseTuple(args, "y*O!O!O!O!|p", &piece, &PyTuple_Type, &arg_keys, &PyDict_Type, &ph_groups,
                          &PyDict_Type, &x_kinds, &PyDict_Type, &specs, &bare))
        return NULL;
    Scan s;
    memset(&s, 0, sizeof(s));
    PyObject *result = NULL, *keys = NULL, *out_groups = NULL, *x = NULL, *other = NULL, *ops = NULL;
    Dict phd = {0}, catd = {0};
    int64_t *ph_codes = NULL, *cat_codes = NULL, *ph_memo = NULL, *cat_memo = NULL;
    int *ph_gid = NULL, *cat_gid = NULL, *gid = NULL;
    Group *groups = NULL;
    Py_ssize_t ngroups = 0;

    s.nargs = (int)PyTuple_GET_SIZE(arg_keys);
    if (s.nargs > MAX_ARGS) {
        PyErr_SetString(PyExc_ValueError, "too many args keys");
        goto done;
    }
    for (int i = 0; i < s.nargs; i++) {
        char *key;
        Py_ssize_t len;
        int kind;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(arg_keys, i), "y#i", &key, &len, &kind)) goto done;
        s.arg_key[i] = key;
        s.arg_len[i] = len;
        s.arg_kind[i] = kind;
    }
    static const char *shape_keys[N_SHAPES] = {"Input Dims", "Input dims", "Input type", "Input Strides",
                                               "Concrete Inputs"};
    for (int i = 0; i < N_SHAPES; i++) {
        s.shape_key[i] = shape_keys[i];
        s.shape_len[i] = (Py_ssize_t)strlen(shape_keys[i]);
    }
    index_keys(&s);
    int init_ok = 1;
    for (int i = 0; i < N_STRF; i++) init_ok = init_ok && intern_init(&s.strs[i]) == 0;
    if (!init_ok) {
        PyErr_NoMemory();
        goto done;
    }
    /* room for the events and args values a piece this long usually holds (pages never
     * written are never resident); grown when a piece holds more */
    s.cap = piece.len / 96 + 16;
    s.capent = piece.len / 48 + 16;
    if (s.cap > (1 << 20)) s.cap = 1 << 20; /* a huge piece grows from here, by doubling */
    if (s.capent > (1 << 21)) s.capent = 1 << 21;
    s.ev = malloc(sizeof(Event) * s.cap);
    s.ent = malloc(sizeof(Entry) * s.capent);
    if (!s.ev || !s.ent) {
        PyErr_NoMemory();
        goto done;
    }
    s.base = piece.buf;
    s.p = s.base;
    s.end = s.base + piece.len;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = read_piece(&s, bare);
    Py_END_ALLOW_THREADS;
    if (rc < 0) {
        if (s.nomem) PyErr_NoMemory();
        else result = Py_NewRef(Py_None);
        goto done;
    }

    /* ph and cat dictionaries over the whole piece (first appearance order) */
    Py_ssize_t nph_ids = s.strs[F_PH].n + 1, ncat_ids = s.strs[F_CAT].n + 1;
    ph_codes = malloc(sizeof(int64_t) * (s.n + 1));
    cat_codes = malloc(sizeof(int64_t) * (s.n + 1));
    ph_memo = malloc(sizeof(int64_t) * nph_ids);
    cat_memo = malloc(sizeof(int64_t) * ncat_ids);
    gid = malloc(sizeof(int) * (s.n + 1));
    if (!ph_codes || !cat_codes || !ph_memo || !cat_memo || !gid || dict_init(&phd) < 0 || dict_init(&catd) < 0)
        goto nomem;
    memset(ph_memo, 0xff, sizeof(int64_t) * nph_ids);
    memset(cat_memo, 0xff, sizeof(int64_t) * ncat_ids);
    if (codes_of(&s, F_PH, NULL, s.n, &phd, ph_memo, ph_codes) < 0) goto done;
    if (codes_of(&s, F_CAT, NULL, s.n, &catd, cat_memo, cat_codes) < 0) goto done;

    /* each event's group: other phases first (first appearance order), then complete events by kind */
    Py_ssize_t nph = PyList_GET_SIZE(phd.values), ncat = PyList_GET_SIZE(catd.values);
    ph_gid = malloc(sizeof(int) * (nph + 1));
    cat_gid = malloc(sizeof(int) * (ncat + 1));
    keys = PyList_New(0);
    x = PyUnicode_FromString("x");
    other = PyUnicode_FromString("other");
    ops = PyUnicode_FromString("ops");
    if (!ph_gid || !cat_gid || !keys || !x || !other || !ops) goto nomem;
    for (Py_ssize_t i = 0; i < nph; i++) ph_gid[i] = -2; /* -2: not yet looked up; -1: complete */
    for (Py_ssize_t i = 0; i < ncat; i++) cat_gid[i] = -2;
    for (int pass = 0; pass < 2; pass++) {
        for (Py_ssize_t r = 0; r < s.n; r++) {
            int64_t pc = ph_codes[r];
            if (ph_gid[pc] == -2) {
                PyObject *k = PyDict_GetItemWithError(ph_groups, PyList_GET_ITEM(phd.values, pc));
                if (!k && PyErr_Occurred()) goto done;
                k = k ? k : other;
                int is_x = PyObject_RichCompareBool(k, x, Py_EQ);
                if (is_x < 0) goto done;
                if (is_x) {
                    ph_gid[pc] = -1;
                } else if (pass == 0) {
                    if ((ph_gid[pc] = group_index(keys, k)) < 0) goto done;
                }
            }
            if (pass == 0) {
                if (ph_gid[pc] >= 0) gid[r] = ph_gid[pc];
                continue;
            }
            if (ph_gid[pc] != -1) continue;
            int64_t cc = cat_codes[r];
            if (cat_gid[cc] == -2) {
                PyObject *k = PyDict_GetItemWithError(x_kinds, PyList_GET_ITEM(catd.values, cc));
                if (!k && PyErr_Occurred()) goto done;
                if ((cat_gid[cc] = group_index(keys, k ? k : ops)) < 0) goto done;
            }
            gid[r] = cat_gid[cc];
        }
    }
    ngroups = PyList_GET_SIZE(keys);
    groups = calloc(ngroups + 1, sizeof(Group));
    if (!groups) goto nomem;
    for (Py_ssize_t r = 0; r < s.n; r++) groups[gid[r]].n++;
    for (Py_ssize_t j = 0; j < ngroups; j++) {
        groups[j].key = PyList_GET_ITEM(keys, j);
        groups[j].rows = malloc(sizeof(Py_ssize_t) * (groups[j].n + 1));
        if (!groups[j].rows) goto nomem;
        groups[j].n = 0;
    }
    for (Py_ssize_t r = 0; r < s.n; r++) {
        Group *g = &groups[gid[r]];
        g->rows[g->n++] = r;
    }
    out_groups = PyList_New(0);
    if (!out_groups) goto done;
    for (Py_ssize_t j = 0; j < ngroups; j++) {
        PyObject *spec = PyDict_GetItemWithError(specs, groups[j].key);
        if (!spec) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_KeyError, "no spec for group %R", groups[j].key);
            goto done;
        }
        PyObject *gd = PyDict_New();
        if (!gd) goto done;
        PyObject *cols = group_columns(&s, &groups[j], spec, cat_codes, ph_codes, gd);
        if (!cols) {
            Py_DECREF(gd);
            goto done;
        }
        PyObject *item = Py_BuildValue("(OnNN)", groups[j].key, groups[j].n, cols, gd);
        if (append_column(out_groups, item) < 0) goto done;
    }
    result = Py_BuildValue("(nOOO)", s.n, phd.values, catd.values, out_groups);
    goto done;
nomem:
    if (!PyErr_Occurred()) PyErr_NoMemory();
done:
    if (!result && PyErr_ExceptionMatches(PyExc_ValueError)) { /* text the Python path must judge */
        PyErr_Clear();
        result = Py_NewRef(Py_None);
    }
    for (Py_ssize_t j = 0; groups && j < ngroups; j++) free(groups[j].rows);
    free(groups);
    free(gid);
    free(ph_gid);
    free(cat_gid);
    free(ph_codes);
    free(cat_codes);
    free(ph_memo);
    free(cat_memo);
    dict_clear(&phd);
    dict_clear(&catd);
    Py_XDECREF(keys);
    Py_XDECREF(out_groups);
    Py_XDECREF(x);
    Py_XDECREF(other);
    Py_XDECREF(ops);
    scan_free(&s);
    PyBuffer_Release(&piece);
    return result;
}

/* ---- a column as an Arrow array (the PyCapsule interface) -------------------------------
 * `arrow_column(column, length)` -> (schema capsule, array capsule): Polars reads it as a
 * Series without copying the buffers, which the array holds (`Mem`). One array a column,
 * not one struct array a batch: Polars keeps a struct's whole import alive while any of
 * its columns lives, and a text column whose strings it shares (`args`) then held every
 * column of its batch (0.26 GB on the 1 GB trace, after the load). */

typedef struct {
    Mem *mem[2];
    const void *buffers[3];
} ColumnData;

static void release_column(struct ArrowArray *a) {
    ColumnData *c = a->private_data;
    mem_unref(c->mem[0]);
    mem_unref(c->mem[1]);
    free(c);
    a->release = NULL;
}

static void release_field(struct ArrowSchema *f) {
    free(f->private_data); /* the name */
    f->release = NULL;
}

static Mem *mem_in(PyObject *obj) {
    if (!PyObject_TypeCheck(obj, &BufferType)) {
        PyErr_SetString(PyExc_TypeError, "a column buffer of this scanner was expected");
        return NULL;
    }
    return ((BufferObject *)obj)->mem;
}

static PyObject *arrow_column(PyObject *self, PyObject *args) {
    const char *name, *kind;
    PyObject *bufs;
    Py_ssize_t length;
    if (!PyArg_ParseTuple(args, "(ssO!)n", &name, &kind, &PyTuple_Type, &bufs, &length)) return NULL;
    int text = strcmp(kind, "utf8") == 0;
    const char *format = text ? "U" : strcmp(kind, "f64") == 0 ? "g" : strcmp(kind, "i64") == 0 ? "l" : NULL;
    if (!format || PyTuple_GET_SIZE(bufs) != (text ? 2 : 1)) {
        PyErr_Format(PyExc_ValueError, "column %s: unknown kind %s or wrong buffers", name, kind);
        return NULL;
    }
    Mem *mems[2] = {NULL, NULL};
    for (int b = 0; b < PyTuple_GET_SIZE(bufs); b++)
        if (!(mems[b] = mem_in(PyTuple_GET_ITEM(bufs, b)))) return NULL;
    if (mems[0]->len != (text ? length + 1 : length) * 8) {
        PyErr_Format(PyExc_ValueError, "column %s: %zd bytes for %zd rows", name, mems[0]->len, length);
        return NULL;
    }
    struct ArrowSchema *field = calloc(1, sizeof *field);
    struct ArrowArray *array = calloc(1, sizeof *array);
    ColumnData *cd = calloc(1, sizeof *cd);
    char *copy = strdup(name);
    if (!field || !array || !cd || !copy) {
        free(field);
        free(array);
        free(cd);
        free(copy);
        return PyErr_NoMemory();
    }
    field->format = format;
    field->name = copy;
    field->private_data = copy;
    field->release = release_field;
    for (int b = 0; b < 2; b++)
        if (mems[b]) {
            mem_ref(mems[b]);
            cd->mem[b] = mems[b];
            cd->buffers[b + 1] = mems[b]->data;
        }
    array->length = length;
    array->n_buffers = text ? 3 : 2;
    array->buffers = cd->buffers;
    array->private_data = cd;
    array->release = release_column;
    PyObject *sc = PyCapsule_New(field, "arrow_schema", free_schema_capsule);
    if (!sc) {
        release_field(field);
        free(field);
        release_column(array);
        free(array);
        return NULL;
    }
    PyObject *ar = PyCapsule_New(array, "arrow_array", free_array_capsule);
    if (!ar) {
        Py_DECREF(sc);
        release_column(array);
        free(array);
        return NULL;
    }
    return Py_BuildValue("(NN)", sc, ar);
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "scan(piece, arg_keys, ph_groups, x_kinds, specs, bare=False) -> batch parts, or None"},
    {"arrow_column", arrow_column, METH_VARARGS,
     "arrow_column((name, kind, buffers), length) -> (schema capsule, array capsule) of one Arrow array"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", "Native scan of event-array pieces.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__scan(void) {
    if (PyType_Ready(&BufferType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Py_INCREF(&BufferType);
    if (PyModule_AddObject(m, "Buffer", (PyObject *)&BufferType) < 0) {
        Py_DECREF(&BufferType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
