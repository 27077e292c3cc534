"""The CPU backend: aten ops mapped to oneDNN Graph ops (op_table), a block's
backend graph (op_mapping, graph_desc), and oneDNN's partitions kept under the
plugin's rules (partition). csrc/backend.cpp compiles and runs what they describe."""
