/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * Replays fuzz inputs without libFuzzer, so that corpora run as ordinary tests with any compiler:
 *
 *   fuzz-TARGET-replay FILE|DIR...
 *
 * Each file (and each file of each directory, in name order) is fed once to the target's
 * LLVMFuzzerTestOneInput(). A target aborts on what it considers a bug; a clean pass exits 0.
 */

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "fuzz.h"

static int by_name(const struct dirent **a, const struct dirent **b) {
        return strcmp((*a)->d_name, (*b)->d_name);
}

static int replay_file(const char *path) {
        size_t len;
        char *data = fuzz_read_file(path, &len);

        if (!data) {
                fprintf(stderr, "Failed to read %s: %m\n", path);
                return -1;
        }
        fprintf(stderr, "%s (%zu bytes)\n", path, len);
        LLVMFuzzerTestOneInput((const uint8_t *) data, len);
        free(data);
        return 0;
}

int main(int argc, char **argv) {
        unsigned n_files = 0;

        if (argc < 2) {
                fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
                return EXIT_FAILURE;
        }
        for (int i = 1; i < argc; i++) {
                struct dirent **entries;
                struct stat st;
                int n;

                if (stat(argv[i], &st) < 0) {
                        fprintf(stderr, "Failed to stat %s: %m\n", argv[i]);
                        return EXIT_FAILURE;
                }
                if (!S_ISDIR(st.st_mode)) {
                        if (replay_file(argv[i]) < 0)
                                return EXIT_FAILURE;
                        n_files++;
                        continue;
                }
                n = scandir(argv[i], &entries, NULL, by_name);
                if (n < 0) {
                        fprintf(stderr, "Failed to list %s: %m\n", argv[i]);
                        return EXIT_FAILURE;
                }
                for (int k = 0; k < n; k++) {
                        char path[PATH_MAX];

                        if (entries[k]->d_name[0] != '.') {
                                snprintf(path, sizeof(path), "%s/%s", argv[i], entries[k]->d_name);
                                if (replay_file(path) < 0)
                                        return EXIT_FAILURE;
                                n_files++;
                        }
                        free(entries[k]);
                }
                free(entries);
        }
        /* An empty corpus would make the test pass without testing anything. */
        if (n_files == 0) {
                fprintf(stderr, "No inputs found.\n");
                return EXIT_FAILURE;
        }
        fprintf(stderr, "%u inputs replayed.\n", n_files);
        return EXIT_SUCCESS;
}
