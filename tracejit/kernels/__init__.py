"""The CPU kernels the inference passes choose (passes/numpy_regions.py, conv_kernels.py, linear_kernels.py)
and the optimized program runs: numpy / numexpr regions, oneDNN convolutions and linears. Runtime code
that sits below passes/, so a pass imports the kernel it installs; kernels import only torch, numpy, the
base layer and codegen's compiler."""
