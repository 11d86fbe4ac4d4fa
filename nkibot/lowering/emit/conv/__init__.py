"""Convolution emitters: taps as shifted matmuls, banded weights, transposed convolution by
output phase, and depthwise convolution."""
