/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The text of Aggregate snapshots (client/histogram.c), byte for byte: log2 buckets with the empty
 * ones between filled in, [0] and [1] alone, K for 1024 and the negative bucket open below; linear
 * buckets with the one below MIN and the one from MAX up; quantiles in ns for a latency; a count's
 * table by count, the key of no group "(all)", with and without its header; the line of what was
 * missed, and none when nothing was.
 */

#include <json-c/json.h>

#include "histogram.h"
#include "output.h"
#include "tpd-test.h"

static void check_render(const char *snapshot, const HistogramLayout *layout, const char *expected) {
        json_object *o = json_tokener_parse(snapshot);
        char *text = NULL;
        size_t size = 0;
        FILE *f = open_memstream(&text, &size);

        ASSERT(o);
        ASSERT(f);
        histogram_render(f, o, layout);
        ASSERT(fclose(f) == 0);
        ASSERT_MEM_EQ(text, size, expected, strlen(expected));
        free(text);
        json_object_put(o);
}

static void test_log2(void) {
        check_render(
                "{\"kind\":\"latency\",\"records\":13,\"lost\":12,\"keys_dropped\":3,\"pending_dropped\":0,"
                "\"groups\":[{\"key\":\"bash\",\"count\":11,\"p50\":7,\"p90\":2047,\"p99\":2047,\"max\":"
                "1500,"
                "\"buckets\":[{\"low\":-4,\"high\":0,\"count\":1},{\"low\":0,\"high\":1,\"count\":2},"
                "{\"low\":4,\"high\":8,\"count\":4},{\"low\":1024,\"high\":2048,\"count\":4}]},"
                "{\"key\":\"\",\"count\":2,\"buckets\":[{\"low\":1,\"high\":2,\"count\":2}]}]}",
                &(HistogramLayout){},
                "@[bash]:\n"
                "(..., 0)                1 |@@@@@@@@@@@@@                                       |\n"
                "[0]                     2 |@@@@@@@@@@@@@@@@@@@@@@@@@@                          |\n"
                "[1]                     0 |                                                    |\n"
                "[2, 4)                  0 |                                                    |\n"
                "[4, 8)                  4 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n"
                "[8, 16)                 0 |                                                    |\n"
                "[16, 32)                0 |                                                    |\n"
                "[32, 64)                0 |                                                    |\n"
                "[64, 128)               0 |                                                    |\n"
                "[128, 256)              0 |                                                    |\n"
                "[256, 512)              0 |                                                    |\n"
                "[512, 1K)               0 |                                                    |\n"
                "[1K, 2K)                4 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n"
                "count 11  p50 7 ns  p90 2047 ns  p99 2047 ns  max 1500 ns\n"
                "\n"
                "@:\n"
                "[1]                     2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n"
                "count 2  p50 -  p90 -  p99 -  max -\n"
                "\n"
                "lost 12 records; 3 keys dropped\n");
}

static void test_linear(void) {
        check_render("{\"kind\":\"hist\",\"lost\":0,\"keys_dropped\":0,\"no_value\":5,"
                     "\"groups\":[{\"key\":\"7\",\"count\":6,\"p50\":19,\"p90\":100,\"p99\":100,\"max\":250,"
                     "\"buckets\":[{\"low\":-9223372036854775808,\"high\":0,\"count\":1},"
                     "{\"low\":0,\"high\":50,\"count\":3},{\"low\":100,\"high\":9223372036854775807,"
                     "\"count\":2}]}]}",
                     &(HistogramLayout){ .linear = true, .min = 0, .max = 100, .step = 50 },
                     "@[7]:\n"
                     "(..., 0)                1 |@@@@@@@@@@@@@@@@@                                   |\n"
                     "[0, 50)                 3 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n"
                     "[50, 100)               0 |                                                    |\n"
                     "[100, ...)              2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                  |\n"
                     "count 6  p50 19  p90 100  p99 100  max 250\n"
                     "\n"
                     "5 records without a value\n");
        /* Step 10: [0, 10) between the bucket below and [10, 20), then [20, 30) to [90, 100). */
        check_render(
                "{\"kind\":\"hist\",\"groups\":[{\"key\":\"\",\"count\":3,"
                "\"buckets\":[{\"low\":-100,\"high\":0,\"count\":1},{\"low\":10,\"high\":20,\"count\":1},"
                "{\"low\":100,\"high\":200,\"count\":1}]}]}",
                &(HistogramLayout){ .linear = true, .min = 0, .max = 100, .step = 10 },
                "@:\n"
                "(..., 0)                1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n"
                "[0, 10)                 0 |                                                    |\n"
                "[10, 20)                1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n"
                "[20, 30)                0 |                                                    |\n"
                "[30, 40)                0 |                                                    |\n"
                "[40, 50)                0 |                                                    |\n"
                "[50, 60)                0 |                                                    |\n"
                "[60, 70)                0 |                                                    |\n"
                "[70, 80)                0 |                                                    |\n"
                "[80, 90)                0 |                                                    |\n"
                "[90, 100)               0 |                                                    |\n"
                "[100, ...)              1 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n"
                "count 3  p50 -  p90 -  p99 -  max -\n"
                "\n");
}

static void test_count(void) {
        static const char snapshot[] =
                "{\"kind\":\"count\",\"lost\":0,\"keys_dropped\":1,\"pending_dropped\":2,"
                "\"groups\":[{\"key\":\"sshd\",\"count\":5},{\"key\":\"a\\u001b\",\"count\":40},"
                "{\"key\":\"cron\",\"count\":5},{\"key\":\"\",\"count\":7}]}";

        check_render(snapshot, &(HistogramLayout){},
                     "KEY          COUNT\n"
                     "a\\x1b           40\n"
                     "(all)            7\n"
                     "cron             5\n"
                     "sshd             5\n"
                     "1 keys dropped; 2 unmatched records dropped\n");
        output_legend = false;
        check_render(snapshot, &(HistogramLayout){},
                     "a\\x1b           40\n"
                     "(all)            7\n"
                     "cron             5\n"
                     "sshd             5\n"
                     "1 keys dropped; 2 unmatched records dropped\n");
        output_legend = true;
        /* Nothing missed, nothing counted: no line at all. */
        check_render("{\"kind\":\"count\",\"lost\":0,\"groups\":[]}", &(HistogramLayout){},
                     "KEY        COUNT\n");
}

int main(void) {
        test_log2();
        test_linear();
        test_count();
        return 0;
}
