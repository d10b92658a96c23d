"""headscope: weight-based mechanistic interpretability of GPT-2-family models.

Public API (everything else is private)::

    model = headscope.load("gpt2")                 # hub id, directory, or offline cache
    W = model.weights()                            # processed weights, TransformerLens names
    cache = headscope.run_with_cache(W, model.to_tokens("Hello"), names=["blocks.0.attn.hook_pattern"])
    atlas = headscope.atlas(model)                 # every head from its weights (also a transformers model:
                                                   # headscope.load(GPT2LMHeadModel.from_pretrained(…)))

Convention: activations are row vectors, matrices multiply from the right (x @ W).
"""

from ._errors import BadArgument, HeadscopeError, NotApplicable
from ._version import __version__
from .core.config import Config
from .core.forward import Cache, all_names, run_with_cache
from .core.entry import load
from .core.checkpoint import from_hf_state_dict
from .core.model import Model
from .core.writing import save_checkpoint, to_hf_state_dict
from .core.tokenizer import Tokenizer, bundled_gpt2_tokenizer, escape_token, to_str_tokens
from .core.weights import Block, Processing, Weights, process

# seed 000: the layer-0 split, positional kernels
from . import layer0
from .corpus import read_corpus
from .layer0.kernels import HeadKernel, KernelReport, analyse_kernels
from .shipped import sample_corpus

# seed 000: denominators, calibration, contextual circuit, contextual neurons
from .layer0.calibration import Calibration, calibrate, load_calibration
from .layer0.contextual import Circuit, Fidelity, HeadChoice, build_circuit, circuit_fidelity, select_heads
from .layer0.denominators import DenominatorStability, denominator_stability
from .layer0.neurons import NeuronScan, NeuronTrace, neuron_trace, neuron_traces, predict_neuron, predict_neurons, scan_neurons

# seed 002: semantic heads
from .semantic.bilinear import BilinearForm, bilinear_form, effective_embeddings, explain_score, qk_matrix, topk_targets
from .semantic.clustering import adjusted_rand_index, frequent_tokens
from .semantic.head import HeadAnalysis, HeadClusters, analyse_head, head_clusters
from .semantic.options import ClusterOptions, HeadOptions, SteerOptions
from .semantic.steering import Steered, SteerResult, save_steered, steer, steered_qk
from .semantic.prompts import load_categories
from .semantic.survey import HeadScore, PositionIndependence, SurveyResult, position_independence, survey

# every head from its weights
from .maps.atlas import Atlas, HeadRow, atlas

# both seeds, end to end
from .reproduce import ReproduceResult, reproduce
from .claims.find import Found, find_components, find_reference
from .report import ReportOptions, ReportResult, build_report

__all__ = [
    "__version__",
    "BadArgument", "Block", "Cache", "Config", "HeadscopeError", "Model", "NotApplicable", "Processing", "Tokenizer",
    "Weights",
    "all_names", "bundled_gpt2_tokenizer", "escape_token", "from_hf_state_dict", "load",
    "process", "run_with_cache", "save_checkpoint", "to_hf_state_dict", "to_str_tokens",
    "layer0", "HeadKernel", "KernelReport", "analyse_kernels", "read_corpus", "sample_corpus",
    "Calibration", "calibrate", "load_calibration",
    "Circuit", "Fidelity", "HeadChoice", "build_circuit", "circuit_fidelity", "select_heads",
    "DenominatorStability", "denominator_stability",
    "NeuronScan", "NeuronTrace", "neuron_trace", "neuron_traces", "predict_neuron", "predict_neurons",
    "scan_neurons",
    "BilinearForm", "ClusterOptions", "HeadAnalysis", "HeadClusters", "HeadOptions", "HeadScore", "PositionIndependence", "Steered",
    "SteerOptions", "SteerResult", "SurveyResult", "adjusted_rand_index", "analyse_head", "bilinear_form",
    "effective_embeddings", "explain_score", "frequent_tokens", "head_clusters", "load_categories",
    "position_independence", "qk_matrix", "save_steered", "steer", "steered_qk", "survey", "topk_targets",
    "Atlas", "HeadRow", "atlas",
    "ReproduceResult", "reproduce", "Found", "find_components", "find_reference",
    "ReportOptions", "ReportResult", "build_report",
]
