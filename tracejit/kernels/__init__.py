"""The kernels the inference passes choose and the optimized program runs: on the CPU numpy / numexpr regions,
oneDNN convolutions and linears (passes/numpy_regions.py, conv_kernels.py, linear_kernels.py); on CUDA cuDNN's
fused conv + relu and linears as "nn" GEMMs (passes/cuda_conv_kernels.py, cuda_linear_kernels.py). Runtime code
that sits below passes/, so a pass imports the kernel it installs; kernels import only torch, numpy, the
base layer and codegen's compiler."""
