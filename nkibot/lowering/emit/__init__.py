"""The lowering's emitters: NKI source for one group of a graph, from the decisions of
`schedule/`. `conv/` holds the convolution family."""
