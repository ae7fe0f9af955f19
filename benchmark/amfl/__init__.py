"""The AMFL track's core: architecture specs, block kinds, client models and their graphs."""

from benchmark.amfl.blocks import BLOCKS, Block, Op
from benchmark.amfl import gnn_blocks  # noqa: F401  (registers the GNN encoder kinds)
from benchmark.amfl.graph import ArchGraph, build_graph
from benchmark.amfl.model import AMFLNet, flat_params, load_flat
from benchmark.amfl.spec import ArchSpec, BlockSpec

__all__ = ["AMFLNet", "ArchGraph", "ArchSpec", "BLOCKS", "Block", "BlockSpec", "Op", "build_graph", "flat_params",
           "load_flat"]
