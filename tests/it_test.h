/* Minimal test harness: checks count and report, a failing check prints file:line and the
 * values involved, and main returns non-zero when any check failed. */
#ifndef IT_TEST_H
#define IT_TEST_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "infinitrain/common.h"

static int it_test_checks, it_test_failures;

/* 1 in an AddressSanitizer build (gcc's macro or clang's feature test): the tests that keep the
 * sanitizer pass within make test's time run one case per mechanism there. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_SANITIZER 1
#endif
#endif
#ifndef UNDER_SANITIZER
#define UNDER_SANITIZER 0
#endif

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        it_test_checks++;                                                                                              \
        if (!(cond)) {                                                                                                 \
            it_test_failures++;                                                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, it_last_error()); \
        }                                                                                                              \
    } while (0)

#define CHECK_MSG(cond, ...)                                                                                           \
    do {                                                                                                               \
        it_test_checks++;                                                                                              \
        if (!(cond)) {                                                                                                 \
            it_test_failures++;                                                                                        \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                                   \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
        }                                                                                                              \
    } while (0)

#define CHECK_OK(expr)                                                                                                 \
    do {                                                                                                               \
        it_status st_ = (expr);                                                                                        \
        it_test_checks++;                                                                                              \
        if (st_ != IT_OK) {                                                                                            \
            it_test_failures++;                                                                                        \
            fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #expr, it_status_name(st_),             \
                    it_last_error());                                                                                  \
        }                                                                                                              \
    } while (0)

/* Expect failure with a given status and a message containing `substr`. */
#define CHECK_ERR(expr, status, substr)                                                                                \
    do {                                                                                                               \
        it_status st_ = (expr);                                                                                        \
        it_test_checks++;                                                                                              \
        if (st_ != (status) || strstr(it_last_error(), (substr)) == NULL) {                                            \
            it_test_failures++;                                                                                        \
            fprintf(stderr, "%s:%d: %s: expected %s with \"%s\", got %s: \"%s\"\n", __FILE__, __LINE__, #expr,         \
                    it_status_name(status), (substr), it_status_name(st_), it_last_error());                           \
        }                                                                                                              \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                                          \
    do {                                                                                                               \
        double a_ = (double)(a), b_ = (double)(b);                                                                     \
        it_test_checks++;                                                                                              \
        if (!(fabs(a_ - b_) <= (tol))) {                                                                               \
            it_test_failures++;                                                                                        \
            fprintf(stderr, "%s:%d: |%s - %s| = |%.9g - %.9g| = %.3g > %.3g\n", __FILE__, __LINE__, #a, #b, a_, b_,    \
                    fabs(a_ - b_), (double)(tol));                                                                     \
        }                                                                                                              \
    } while (0)

/* Print the closing line ctest-independent scripts read, and the exit status. */
static inline int it_test_report(const char *name) {
    printf("%s: %d passed, %d failed\n", name, it_test_checks - it_test_failures, it_test_failures);
    return it_test_failures ? 1 : 0;
}

#endif
