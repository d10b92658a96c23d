"""headscope: weight-based mechanistic interpretability of GPT-2-family models.

Public API (everything else is private)::

    model = headscope.load("gpt2")                 # hub id, directory, or offline cache
    W = model.weights()                            # processed weights, TransformerLens names
    cache = headscope.run_with_cache(W, model.to_tokens("Hello"), names=["blocks.0.attn.hook_pattern"])

Convention: activations are row vectors, matrices multiply from the right (x @ W).
"""

from ._errors import HeadscopeError
from .config import Config
from .forward import Cache, all_names, run_with_cache
from .loading import Model, from_hf_state_dict, load, save_checkpoint, to_hf_state_dict
from .tokenizer import bundled_gpt2_tokenizer, escape_token, to_str_tokens
from .weights import Block, Processing, Weights, process

__version__ = "0.1.0"

# seed 000, first half: positional kernels and the content/position split
from .corpus import read_corpus, sample_corpus  # noqa: E402
from .kernels import HeadKernel, KernelReport, analyse_kernels  # noqa: E402

# seed 000, second half: denominators, calibration, contextual circuit, contextual neurons
from .calibration import Calibration, calibrate, load_calibration  # noqa: E402
from .contextual import Circuit, Fidelity, HeadChoice, build_circuit, circuit_fidelity, select_heads  # noqa: E402
from .denominators import DenominatorStability, denominator_stability  # noqa: E402
from .neurons import NeuronScan, NeuronTrace, neuron_trace, predict_neuron, scan_neurons  # noqa: E402

# seed 002: semantic heads
from .bilinear import BilinearForm, bilinear_form, effective_embeddings, explain_score, qk_matrix, topk_targets  # noqa: E402
from .clustering import adjusted_rand_index, frequent_tokens  # noqa: E402
from .head_analysis import HeadAnalysis, analyse_head  # noqa: E402
from .semantic import HeadScore, PositionIndependence, SurveyResult, load_categories, position_independence, survey  # noqa: E402
from .steering import SteerResult, steer, steered_qk  # noqa: E402

# the report (needs __version__ above)
from .report import ReportOptions, ReportResult, build_report  # noqa: E402

__all__ = [
    "Block", "Cache", "Config", "HeadscopeError", "Model", "Processing", "Weights",
    "all_names", "bundled_gpt2_tokenizer", "escape_token", "from_hf_state_dict", "load",
    "process", "run_with_cache", "save_checkpoint", "to_hf_state_dict", "to_str_tokens",
    "HeadKernel", "KernelReport", "analyse_kernels", "read_corpus", "sample_corpus",
    "Calibration", "calibrate", "load_calibration",
    "Circuit", "Fidelity", "HeadChoice", "build_circuit", "circuit_fidelity", "select_heads",
    "DenominatorStability", "denominator_stability",
    "NeuronScan", "NeuronTrace", "neuron_trace", "predict_neuron", "scan_neurons",
    "BilinearForm", "HeadAnalysis", "HeadScore", "PositionIndependence", "SteerResult", "SurveyResult",
    "adjusted_rand_index", "analyse_head", "bilinear_form", "effective_embeddings", "explain_score",
    "frequent_tokens", "load_categories", "position_independence", "qk_matrix", "steer", "steered_qk",
    "survey", "topk_targets",
    "ReportOptions", "ReportResult", "build_report",
]
