"""What generated code calls at run time: plain functions over torch and the base layer (call-time budgets
for programs loaded from a file, the no-backward wrapper of captured autograd Functions). Below codegen,
which names them in the code it writes, and below the runtime, which runs that code."""
