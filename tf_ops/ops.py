"""Public functions, with the signatures and argument handling of TensorFlow's own."""
import tensorflow as tf

from tf_ops import _vocabulary
from tf_ops._loader import load_library

_lib = load_library()

# Registered op names, keyed by the name of the TensorFlow op each one mirrors (the library's list).
OP_NAMES = {name: "TfOps>" + name for name in _vocabulary.ops()}


def _padding(padding):
    """TensorFlow's padding argument: 'SAME', 'VALID', or a list of 4 (before, after) pairs.

    Returns (padding attribute, explicit_paddings attribute).
    """
    if isinstance(padding, (list, tuple)):
        flat = []
        for i, pair in enumerate(padding):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                raise ValueError(
                    "When `padding` is a list, each element of `padding` must be a list/tuple "
                    f"of size 2. Received: padding={padding} with element at index {i}: {pair!r}"
                )
            flat.extend(int(p) for p in pair)
        if len(padding) != 4:
            raise ValueError(
                "When padding is a list, it must be of size 4. "
                f"Received: padding={padding} of size {len(padding)}"
            )
        return "EXPLICIT", flat
    if isinstance(padding, bytes):
        padding = padding.decode()
    if padding == "EXPLICIT":
        raise ValueError(
            "'EXPLICIT' is not a valid value for `padding`. To use explicit padding, "
            "`padding` must be a list."
        )
    if padding not in ("SAME", "VALID"):
        raise ValueError(
            f"`padding` must be 'SAME', 'VALID' or a list of 4 pairs. Received: padding={padding!r}"
        )
    return padding, []


def _sequence(value, name, data_format):
    """Expands strides or dilations of length 1, 2 or 4 (or an int) to 4 values, like
    tf.nn.conv2d: None is all ones; 1 or 2 values fill the spatial positions."""
    if value is None:
        return [1, 1, 1, 1]
    if isinstance(value, int):
        value = [value]
    value = [int(v) for v in value]
    spatial_first = 2 if data_format.startswith("NC") else 1
    if len(value) == 1:
        value = value * 2
    if len(value) == 2:
        full = [1, 1, 1, 1]
        full[spatial_first : spatial_first + 2] = value
        return full
    if len(value) == 4:
        return value
    raise ValueError(
        f"{name} should be of length 1, 2 or 4. Received: {name}={value} of length {len(value)}"
    )


def _ints(value, name):
    """A full-length attribute list (strides/dilations of the raw-op style functions)."""
    if value is None:
        raise ValueError(f"{name} must be given as a list of 4 integers")
    return [int(v) for v in value]


def _alias(new, new_name, old, old_name):
    if new is not None and old is not None:
        raise ValueError(f"Cannot specify both '{new_name}' and '{old_name}'")
    return new if new is not None else old


def _format(data_format):
    if isinstance(data_format, bytes):
        data_format = data_format.decode()
    return data_format


def _run(raw_op, padding, data_format, strides, dilations, name, **inputs):
    """Calls a raw op with the attributes every op of the family shares; `inputs` holds
    its tensors (and use_cudnn_on_gpu where the op has it)."""
    padding, explicit = _padding(padding)
    return raw_op(strides=strides, padding=padding, explicit_paddings=explicit,
                  data_format=_format(data_format), dilations=dilations, name=name, **inputs)


def _rank(value):
    """The static rank of a tensor-like value, or None where it is unknown or has no shape."""
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    return tf.TensorShape(shape).rank


def _with_batch_dims(input, op):  # noqa: A002
    """op(input) for an input with any number of leading batch dimensions before its last
    three (as tf.nn.conv2d takes them): they are folded into one for op, which takes rank 4,
    and unfolded again in its result. Inputs of rank 4 or less, or of unknown rank, go to op
    as they are (op rejects ranks below 4)."""
    rank = _rank(input)
    if rank is None or rank <= 4:
        return op(input)
    input = tf.convert_to_tensor(input, name="input")  # noqa: A001
    static = input.shape

    def dims(shape, tensor, part):
        # A slice of the shape as a list where it is fully known, else from tf.shape.
        known = shape[part]
        return known.as_list() if known.is_fully_defined() else tf.shape(tensor)[part]

    batch_dims = dims(static, input, slice(None, -3))
    inner = dims(static, input, slice(-3, None))
    # The folded batch is computed, not inferred with -1, so that an empty inner dimension
    # still folds.
    if isinstance(batch_dims, list):
        batch = 1
        for d in batch_dims:
            batch *= d
    else:
        batch = tf.reduce_prod(batch_dims)
    folded = tf.reshape(input, tf.concat([[batch], inner], axis=0))
    out = op(folded)
    out_inner = dims(out.shape, out, slice(-3, None))
    result = tf.reshape(out, tf.concat([batch_dims, out_inner], axis=0))
    result.set_shape(static[:-3].concatenate(out.shape[-3:]))
    return result


def conv2d(input, filters, strides, padding, data_format="NHWC", dilations=None, name=None):  # noqa: A002
    """Like tf.nn.conv2d; grouped filters (filters.shape[2] dividing the input depth) work.
    Like tf.nn.conv2d, an input of rank 5 or more has several leading batch dimensions."""
    data_format = _format(data_format)
    strides = _sequence(strides, "strides", data_format)
    dilations = _sequence(dilations, "dilations", data_format)
    return _with_batch_dims(
        input,
        lambda x: _run(_lib.tf_ops_conv2d, padding, data_format, strides, dilations, name,
                       input=x, filter=filters),
    )


def conv2d_backprop_input(
    input_sizes,
    filter=None,  # noqa: A002
    out_backprop=None,
    strides=None,
    padding=None,
    use_cudnn_on_gpu=True,
    data_format="NHWC",
    dilations=[1, 1, 1, 1],  # noqa: B006  (TensorFlow's signature)
    name=None,
    filters=None,
):
    """Like tf.compat.v1.nn.conv2d_backprop_input. input_sizes has 4 values, or 2 ([H, W])."""
    filter = _alias(filters, "filters", filter, "filter")  # noqa: A001
    return _run(
        _lib.tf_ops_conv2d_backprop_input,
        padding,
        data_format,
        _ints(strides, "strides"),
        _ints(dilations, "dilations"),
        name,
        input_sizes=input_sizes,
        filter=filter,
        out_backprop=out_backprop,
        use_cudnn_on_gpu=use_cudnn_on_gpu,
    )


def conv2d_backprop_input_v2(
    input,  # noqa: A002
    filter,  # noqa: A002
    out_backprop,
    strides,
    padding,
    use_cudnn_on_gpu=True,
    data_format="NHWC",
    dilations=[1, 1, 1, 1],  # noqa: B006
    name=None,
):
    """Conv2DBackpropInputV2: like conv2d_backprop_input, with the shape taken from `input`."""
    return _run(
        _lib.tf_ops_conv2d_backprop_input_v2,
        padding,
        data_format,
        _ints(strides, "strides"),
        _ints(dilations, "dilations"),
        name,
        input=input,
        filter=filter,
        out_backprop=out_backprop,
        use_cudnn_on_gpu=use_cudnn_on_gpu,
    )


def conv2d_transpose(
    input,  # noqa: A002
    filters,
    output_shape,
    strides,
    padding="SAME",
    data_format="NHWC",
    dilations=None,
    name=None,
):
    """Like tf.nn.conv2d_transpose (strides and dilations of length 1, 2 or 4)."""
    data_format = _format(data_format)
    with tf.name_scope(name or "conv2d_transpose") as scope:
        return _run(
            _lib.tf_ops_conv2d_backprop_input, padding, data_format,
            _sequence(strides, "strides", data_format), _sequence(dilations, "dilations", data_format),
            scope, input_sizes=output_shape, filter=filters, out_backprop=input)


def conv2d_backprop_filter(
    input,  # noqa: A002
    filter_sizes,
    out_backprop,
    strides,
    padding,
    use_cudnn_on_gpu=True,
    data_format="NHWC",
    dilations=[1, 1, 1, 1],  # noqa: B006
    name=None,
):
    """Like tf.compat.v1.nn.conv2d_backprop_filter."""
    return _run(
        _lib.tf_ops_conv2d_backprop_filter,
        padding,
        data_format,
        _ints(strides, "strides"),
        _ints(dilations, "dilations"),
        name,
        input=input,
        filter_sizes=filter_sizes,
        out_backprop=out_backprop,
        use_cudnn_on_gpu=use_cudnn_on_gpu,
    )


def conv2d_backprop_filter_v2(
    input,  # noqa: A002
    filter,  # noqa: A002
    out_backprop,
    strides,
    padding,
    use_cudnn_on_gpu=True,
    data_format="NHWC",
    dilations=[1, 1, 1, 1],  # noqa: B006
    name=None,
):
    """Conv2DBackpropFilterV2: like conv2d_backprop_filter, with the shape taken from `filter`."""
    return _run(
        _lib.tf_ops_conv2d_backprop_filter_v2,
        padding,
        data_format,
        _ints(strides, "strides"),
        _ints(dilations, "dilations"),
        name,
        input=input,
        filter=filter,
        out_backprop=out_backprop,
        use_cudnn_on_gpu=use_cudnn_on_gpu,
    )


def depthwise_conv2d_native(
    input,  # noqa: A002
    filter,  # noqa: A002
    strides,
    padding,
    data_format="NHWC",
    dilations=[1, 1, 1, 1],  # noqa: B006
    name=None,
):
    """Like tf.compat.v1.nn.depthwise_conv2d_native; dilations are honoured."""
    return _run(
        _lib.tf_ops_depthwise_conv2d_native,
        padding,
        data_format,
        _ints(strides, "strides"),
        _ints(dilations, "dilations"),
        name,
        input=input,
        filter=filter,
    )


def depthwise_conv2d_backprop_input(
    input_sizes,
    filter,  # noqa: A002
    out_backprop,
    strides,
    padding,
    data_format="NHWC",
    dilations=[1, 1, 1, 1],  # noqa: B006
    name=None,
):
    """Like tf.nn.depthwise_conv2d_backprop_input; dilations are honoured."""
    return _run(
        _lib.tf_ops_depthwise_conv2d_native_backprop_input,
        padding,
        data_format,
        _ints(strides, "strides"),
        _ints(dilations, "dilations"),
        name,
        input_sizes=input_sizes,
        filter=filter,
        out_backprop=out_backprop,
    )


def depthwise_conv2d_backprop_filter(
    input,  # noqa: A002
    filter_sizes,
    out_backprop,
    strides,
    padding,
    data_format="NHWC",
    dilations=[1, 1, 1, 1],  # noqa: B006
    name=None,
):
    """Like tf.nn.depthwise_conv2d_backprop_filter; dilations are honoured."""
    return _run(
        _lib.tf_ops_depthwise_conv2d_native_backprop_filter,
        padding,
        data_format,
        _ints(strides, "strides"),
        _ints(dilations, "dilations"),
        name,
        input=input,
        filter_sizes=filter_sizes,
        out_backprop=out_backprop,
    )
