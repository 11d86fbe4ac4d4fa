"""The lowering's decisions: where each value lives (layout), tile and loop order, convolution
tap folds, and the graph rewrites applied before a graph is cut into stages."""
