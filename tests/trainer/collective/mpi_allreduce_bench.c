/* Open MPI reference for tools/bench.d/allreduce: the same measurement as allreduce_bench.cc
 * (calibrated iterations, median of reps, mean over ranks) with MPI_Allreduce in place on floats.
 * Built by the bench script with mpicc; prints
 *   RESULT ranks=4 topology=mpi bytes=... iters=... seconds=... algbw_gbit=... busbw_gbit=...  */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  size_t min_bytes = 4 << 10, max_bytes = 256u << 20;
  double target = 0.25;
  int reps = 3;
  const char* label = "mpi";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--min"))
      min_bytes = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--max"))
      max_bytes = strtoull(argv[i + 1], NULL, 10);
    else if (!strcmp(argv[i], "--seconds"))
      target = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--reps"))
      reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--label"))
      label = argv[i + 1];
  }
  float* buf = calloc(max_bytes / sizeof(float), sizeof(float)); /* zeros: sums stay finite */
  double* samples = calloc((size_t)reps, sizeof(double));
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
    int count = (int)(bytes / sizeof(float));
    MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double s = MPI_Wtime();
    MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double one = MPI_Wtime() - s;
    int iters = (int)(target / (one > 1e-7 ? one : 1e-7));
    if (iters < 1) iters = 1;
    if (iters > 2000) iters = 2000;
    MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
    for (int r = 0; r < reps; ++r) {
      MPI_Barrier(MPI_COMM_WORLD);
      s = MPI_Wtime();
      for (int i = 0; i < iters; ++i)
        MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      samples[r] = (MPI_Wtime() - s) / iters;
    }
    qsort(samples, (size_t)reps, sizeof(double), cmp);
    double median = samples[reps / 2], sum = 0;
    MPI_Reduce(&median, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      double sec = sum / world;
      printf(
          "RESULT ranks=%d topology=%s bytes=%zu iters=%d seconds=%.9f algbw_gbit=%.3f "
          "busbw_gbit=%.3f\n",
          world, label, bytes, iters, sec, bytes / sec * 8e-9,
          bytes / sec * 2.0 * (world - 1) / world * 8e-9);
      fflush(stdout);
    }
  }
  free(samples);
  free(buf);
  MPI_Finalize();
  return 0;
}
