"""``config.pbtxt``: parse, validate, auto-complete, normalise and print Triton's ModelConfig.

Pure Python (protobuf + tritonclient's generated ``model_config_pb2``); no Django. The serving
process imports this package.
"""

from repository.config.autocomplete import autocomplete, autocomplete_config, read_onnx_io
from repository.config.complete import CompletedConfig, complete_config
from repository.config.datatypes import (
    config_datatype,
    config_datatype_from_onnx,
    config_datatype_name,
    datatype_from_numpy,
    element_size,
    numpy_dtype,
    onnx_elem_type,
    wire_datatype,
)
from repository.config.ensembles import (
    ensemble_composition_problems,
    validate_ensemble_composition,
)
from repository.config.errors import ConfigError
from repository.config.layout import (
    ModelFolder,
    check_model_name,
    detect_platform,
    model_file,
    scan_model_folder,
    version_number,
)
from repository.config.normalize import normalize_config
from repository.config.parse import (
    config_to_json,
    config_to_text,
    parse_config_json,
    parse_config_text,
)
from repository.config.validate import config_problems, validate_config
from repository.config.versions import select_versions

__all__ = [
    "CompletedConfig",
    "ConfigError",
    "ModelFolder",
    "autocomplete",
    "autocomplete_config",
    "check_model_name",
    "complete_config",
    "config_datatype",
    "config_datatype_from_onnx",
    "config_datatype_name",
    "config_problems",
    "config_to_json",
    "config_to_text",
    "datatype_from_numpy",
    "detect_platform",
    "element_size",
    "ensemble_composition_problems",
    "model_file",
    "normalize_config",
    "numpy_dtype",
    "onnx_elem_type",
    "parse_config_json",
    "parse_config_text",
    "read_onnx_io",
    "scan_model_folder",
    "select_versions",
    "validate_config",
    "validate_ensemble_composition",
    "version_number",
    "wire_datatype",
]
