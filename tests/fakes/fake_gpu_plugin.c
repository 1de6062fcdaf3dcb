/* A FAKE GPU plug-in for rbench (built as libfake_gpu_plugin.so) on a machine without
 * CUDA's libraries: it needs libfake_cudart.so (this file built with FAKE_CUDART), which
 * is built beside it but is on no library path (the plug-in has no RUNPATH), so that
 * dlopen fails as it does for rbench_gpu.so where libcudart.so.13 is missing. Tests load
 * it through RKIT_BENCH_GPU_PLUGIN. */
#ifdef FAKE_CUDART
int fake_cuda_runtime_version(void) { return 13000; }
#else
int fake_cuda_runtime_version(void);
int fake_gpu_plugin_probe(void) { return fake_cuda_runtime_version(); }
#endif
