"""Keras 3 layers whose convolutions run on tf_ops ops.

`Conv2D`, `DepthwiseConv2D` and `Conv2DTranspose` take the arguments of the Keras layers of
the same names, keep their weights in the same layout (a model's weights load into either),
and give the same outputs wherever Keras runs the case. They also run what Keras refuses:
`groups` in Conv2DTranspose, strides together with dilation in Conv2D and Conv2DTranspose; and
NCHW (`data_format="channels_first"`) runs natively on CPU.
`DepthwiseConv2DTranspose` has no Keras counterpart.

The layers need Keras's TensorFlow backend. Every op they run has an XLA lowering, so each
layer says it supports XLA (`supports_jit = True`): `jit_compile=True` compiles a whole model
built from them, and Keras's default `jit_compile="auto"` decides as for its own layers.
Mixed precision works: under "mixed_float16" or "mixed_bfloat16" the convolution runs in the
compute dtype on float32 weights.
"""
import keras
import tensorflow as tf

from tf_ops import ops as _ops

__all__ = ["Conv2D", "Conv2DTranspose", "DepthwiseConv2D", "DepthwiseConv2DTranspose"]

_register = keras.saving.register_keras_serializable(package="tf_ops")


def _pair(value, name, minimum=1):
    """An int or a sequence of 2 ints, as a tuple of 2 ints each at least `minimum`; the
    errors in Keras's words."""
    message = f"The `{name}` argument must be a tuple of 2 integers. Received {name}={value}"
    if isinstance(value, int):
        values = (value, value)
    else:
        try:
            values = tuple(value)
        except TypeError:
            raise ValueError(message) from None
        if len(values) != 2:
            raise ValueError(message)
        for v in values:
            if not isinstance(v, int):
                raise ValueError(f"{message}, including element {v} of type {type(v)}")
    bad = {v for v in values if v < minimum}
    if bad:
        raise ValueError(f"{message}, including values {bad} that do not satisfy "
                         f"`value {'> 0' if minimum == 1 else '>= 0'}`")
    return values


def _padding(padding):
    if not isinstance(padding, str) or padding.lower() not in ("valid", "same"):
        raise ValueError(f"`padding` must be 'valid' or 'same'. Received: padding={padding!r}")
    return padding.lower()


def _data_format(data_format):
    data_format = data_format or keras.config.image_data_format()
    if data_format not in ("channels_last", "channels_first"):
        raise ValueError(
            "`data_format` must be 'channels_last' or 'channels_first'. "
            f"Received: data_format={data_format!r}"
        )
    return data_format


def _conv_length(size, kernel, stride, dilation, padding):
    """Output length of a convolution along one axis (as Keras computes it); None if unknown.
    A "valid" length of zero or less is returned as it is: the caller refuses it."""
    if size is None:
        return None
    if padding == "same":
        return -(-size // stride)
    return (size - (kernel - 1) * dilation - 1) // stride + 1


def _transpose_length(size, kernel, stride, dilation, padding, output_padding):
    """Output length of a transposed convolution along one axis, by Keras's rule; `size` may
    be a scalar tensor (then so is the result) or None (unknown)."""
    if size is None:
        return None
    span = (kernel - 1) * dilation + 1
    if padding == "valid":
        extra = max(span, stride) - span if output_padding is None else output_padding
        return (size - 1) * stride + span + extra
    if output_padding is None:
        return size * stride
    return (size - 1) * stride + span - 2 * (span // 2) + output_padding


class _Conv(keras.layers.Layer):
    """What the four layers share: arguments, weights, bias, activation, config, shapes.

    A subclass sets `_kernel_arg` (the prefix of its weight arguments, "kernel" or
    "depthwise" as in Keras) and defines `_kernel_shape`, `_output_channels` and `_convolve`;
    the transposed layers replace `_output_lengths`.
    """

    _kernel_arg = "kernel"

    def __init__(self, kernel_size, strides, padding, data_format, dilation_rate, activation,
                 use_bias, kernel_initializer, bias_initializer, kernel_regularizer,
                 bias_regularizer, activity_regularizer, kernel_constraint, bias_constraint,
                 **kwargs):
        backend = keras.backend.backend()
        if backend != "tensorflow":
            raise RuntimeError(
                f"tf_ops.layers.{type(self).__name__} runs TensorFlow ops, so it needs Keras's "
                f"TensorFlow backend; the active Keras backend is {backend!r}. Set "
                "KERAS_BACKEND=tensorflow before Keras is first imported."
            )
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.strides = _pair(strides, "strides")
        self.padding = _padding(padding)
        self.data_format = _data_format(data_format)
        self.dilation_rate = _pair(dilation_rate, "dilation_rate")
        self.activation = keras.activations.get(activation)
        self.use_bias = use_bias
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.input_spec = keras.layers.InputSpec(ndim=4)
        # Every op of the family has an XLA lowering (cc/kernels/conv_xla.cc).
        self.supports_jit = True

    @property
    def _channel_axis(self):
        return -1 if self.data_format == "channels_last" else 1

    @property
    def _tf_format(self):
        return "NHWC" if self.data_format == "channels_last" else "NCHW"

    def _spatial(self, shape):
        return tuple(shape[1:3]) if self.data_format == "channels_last" else tuple(shape[2:4])

    def _full(self, batch, lengths, channels):
        """A 4-d shape in the layer's data format from batch, (height, width) and channels."""
        if self.data_format == "channels_last":
            return [batch, lengths[0], lengths[1], channels]
        return [batch, channels, lengths[0], lengths[1]]

    def build(self, input_shape):
        channels = input_shape[self._channel_axis]
        if channels is None:
            raise ValueError(
                f"The channel dimension of the input to {type(self).__name__} must be known. "
                f"Received input_shape={tuple(input_shape)}"
            )
        self._check_channels(channels, tuple(input_shape))
        self.input_spec = keras.layers.InputSpec(ndim=4, axes={self._channel_axis: channels})
        # Refuses an output of no pixels before any weight is made, as Keras does.
        self.compute_output_shape(input_shape)
        self._kernel = self.add_weight(
            name="kernel",
            shape=self._kernel_shape(channels),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
            trainable=True,
            dtype=self.dtype,
        )
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias",
                shape=(self._output_channels(channels),),
                initializer=self.bias_initializer,
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
                trainable=True,
                dtype=self.dtype,
            )
        else:
            self.bias = None

    def _check_channels(self, channels, input_shape):
        """Refuses input channels the layer cannot take; a grouped layer overrides it."""

    @property
    def kernel(self):
        """The kernel the convolution uses (Conv2D with LoRA: the merged one)."""
        if not self.built:
            raise AttributeError("You must build the layer before accessing `kernel`.")
        return self._kernel

    def call(self, inputs):
        # An input of another shape than the one built for may give no output pixels.
        self.compute_output_shape(tuple(inputs.shape))
        kernel = tf.cast(self.kernel, self.compute_dtype)
        outputs = self._convolve(inputs, kernel)
        if self.use_bias:
            bias = tf.cast(self.bias, self.compute_dtype)
            shape = [1, 1, 1, -1] if self.data_format == "channels_last" else [1, -1, 1, 1]
            outputs = outputs + tf.reshape(bias, shape)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    def _output_lengths(self, lengths):
        """Output (height, width) for input (height, width); a transposed layer overrides it."""
        return tuple(_conv_length(n, k, s, d, self.padding) for n, k, s, d in
                     zip(lengths, self.kernel_size, self.strides, self.dilation_rate))

    def compute_output_shape(self, input_shape):
        input_shape = tuple(input_shape)
        lengths = self._output_lengths(self._spatial(input_shape))
        if any(n is not None and n <= 0 for n in lengths):
            raise ValueError(
                "Computed output size would be zero or negative. Received "
                f"`inputs shape={input_shape}`, `kernel shape={self.kernel_size}`, "
                f"`dilation_rate={self.dilation_rate}`, `strides={self.strides}`, "
                f"`padding={self.padding}`."
            )
        return tuple(self._full(input_shape[0], lengths,
                                self._output_channels(input_shape[self._channel_axis])))

    def get_config(self):
        prefix = self._kernel_arg
        config = super().get_config()
        config.update({
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
            "data_format": self.data_format,
            "dilation_rate": self.dilation_rate,
            "activation": keras.activations.serialize(self.activation),
            "use_bias": self.use_bias,
            f"{prefix}_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            f"{prefix}_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
            "activity_regularizer": keras.regularizers.serialize(self.activity_regularizer),
            f"{prefix}_constraint": keras.constraints.serialize(self.kernel_constraint),
            "bias_constraint": keras.constraints.serialize(self.bias_constraint),
        })
        return config


def _groups(groups, filters):
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"The number of groups must be a positive integer. Received: groups={groups}.")
    if filters % groups:
        raise ValueError(
            "The number of filters must be evenly divisible by the number of groups. "
            f"Received: groups={groups}, filters={filters}."
        )
    return groups


def _check_groups(channels, groups, input_shape):
    if channels % groups:
        raise ValueError(
            "The number of input channels must be evenly divisible by the number of groups. "
            f"Received groups={groups}, but the input has {channels} channels (full input "
            f"shape is {input_shape})."
        )


def _positive(value, name):
    if not isinstance(value, int) or value < 1:
        raise ValueError(f"Invalid value for argument `{name}`. Expected a strictly positive "
                         f"value. Received {name}={value}.")
    return value


class _Filters(_Conv):
    """A layer with a `filters` argument (Conv2D, Conv2DTranspose)."""

    def __init__(self, filters, kernel_size, groups=1, **kwargs):
        super().__init__(kernel_size, **kwargs)
        self.filters = _positive(filters, "filters")
        self.groups = _groups(groups, filters)

    def _output_channels(self, channels):
        return self.filters

    def _check_channels(self, channels, input_shape):
        _check_groups(channels, self.groups, input_shape)

    def get_config(self):
        config = super().get_config()
        config.update({"filters": self.filters, "groups": self.groups})
        return config


class _Depthwise(_Conv):
    """A layer with a `depth_multiplier` argument (DepthwiseConv2D and its transpose)."""

    _kernel_arg = "depthwise"

    def __init__(self, kernel_size, depth_multiplier=1, depthwise_initializer="glorot_uniform",
                 depthwise_regularizer=None, depthwise_constraint=None, **kwargs):
        super().__init__(kernel_size, kernel_initializer=depthwise_initializer,
                         kernel_regularizer=depthwise_regularizer,
                         kernel_constraint=depthwise_constraint, **kwargs)
        self.depth_multiplier = _positive(depth_multiplier, "depth_multiplier")

    def _kernel_shape(self, channels):
        return self.kernel_size + (channels, self.depth_multiplier)

    def _output_channels(self, channels):
        return None if channels is None else channels * self.depth_multiplier

    def get_config(self):
        config = super().get_config()
        config["depth_multiplier"] = self.depth_multiplier
        return config


def _conv_args(kwargs, strides, padding, data_format, dilation_rate, activation, use_bias,
               bias_initializer, bias_regularizer, activity_regularizer, bias_constraint):
    kwargs.update(strides=strides, padding=padding, data_format=data_format,
                  dilation_rate=dilation_rate, activation=activation, use_bias=use_bias,
                  bias_initializer=bias_initializer, bias_regularizer=bias_regularizer,
                  activity_regularizer=activity_regularizer, bias_constraint=bias_constraint)
    return kwargs


@_register
class Conv2D(_Filters):
    """Drop-in for `keras.layers.Conv2D`, on `TfOps>Conv2D`.

    Kernel shape (kernel_h, kernel_w, input_channels // groups, filters), as Keras's. Runs
    grouped, NCHW and dilated convolutions on CPU.

    LoRA as Keras's: `lora_rank` (or `enable_lora(rank)` on a built layer) freezes the kernel
    and trains `lora_kernel_a` (kernel_h, kernel_w, input_channels // groups, rank) and
    `lora_kernel_b` (rank, filters), in float32; the kernel used is kernel + lora_alpha /
    lora_rank * a @ b, and it is that merged kernel which is saved as the layer's weights.
    """

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, lora_rank=None, lora_alpha=None,
                 **kwargs):
        super().__init__(filters, kernel_size, groups=groups,
                         kernel_initializer=kernel_initializer,
                         kernel_regularizer=kernel_regularizer,
                         kernel_constraint=kernel_constraint,
                         **_conv_args(kwargs, strides, padding, data_format, dilation_rate,
                                      activation, use_bias, bias_initializer, bias_regularizer,
                                      activity_regularizer, bias_constraint))
        self.lora_rank = lora_rank
        self.lora_alpha = lora_alpha if lora_alpha is not None else lora_rank
        self.lora_enabled = False

    def _kernel_shape(self, channels):
        return self.kernel_size + (channels // self.groups, self.filters)

    def build(self, input_shape):
        super().build(input_shape)
        self.built = True
        if self.lora_rank:
            self.enable_lora(self.lora_rank, lora_alpha=self.lora_alpha)

    @property
    def kernel(self):
        kernel = super().kernel
        if self.lora_enabled:
            delta = tf.matmul(self.lora_kernel_a, self.lora_kernel_b)
            kernel = tf.cast(kernel + (self.lora_alpha / self.lora_rank) * delta, self.compute_dtype)
        return kernel

    def enable_lora(self, rank, lora_alpha=None, a_initializer="he_uniform", b_initializer="zeros"):
        """Freezes the kernel and adds the trainable low-rank update a @ b, scaled by
        lora_alpha / rank (lora_alpha defaults to rank)."""
        if self.kernel_constraint:
            raise ValueError("Lora is incompatible with kernel constraints. In order to enable lora "
                             "on this layer, remove the `kernel_constraint` argument.")
        if not self.built:
            raise ValueError("Cannot enable lora on a layer that isn't yet built.")
        if self.lora_enabled:
            raise ValueError("lora is already enabled. This can only be done once per layer.")
        # A built layer's variables are locked; Keras's own layers unlock them the same way.
        self._tracker.unlock()
        # float32 whatever the layer's dtype, so that fine-tuning does not underflow.
        self.lora_kernel_a = self.add_weight(
            name="lora_kernel_a", shape=tuple(self._kernel.shape[:-1]) + (rank,),
            initializer=keras.initializers.get(a_initializer), dtype="float32",
            regularizer=self.kernel_regularizer)
        self.lora_kernel_b = self.add_weight(
            name="lora_kernel_b", shape=(rank, self.filters),
            initializer=keras.initializers.get(b_initializer), dtype="float32",
            regularizer=self.kernel_regularizer)
        self._kernel.trainable = False
        self._tracker.lock()
        self.lora_enabled = True
        self.lora_rank = rank
        self.lora_alpha = lora_alpha if lora_alpha is not None else rank

    def save_own_variables(self, store):
        # With LoRA, the merged kernel is saved in the kernel's place: the weights load into a
        # layer without LoRA.
        if not self.lora_enabled:
            return super().save_own_variables(store)
        for i, variable in enumerate([self.kernel] + ([self.bias] if self.use_bias else [])):
            store[str(i)] = variable

    def load_own_variables(self, store):
        if not self.lora_enabled:
            return super().load_own_variables(store)
        for i, variable in enumerate([self._kernel] + ([self.bias] if self.use_bias else [])):
            variable.assign(store[str(i)])
        self.lora_kernel_a.assign(tf.zeros(self.lora_kernel_a.shape))
        self.lora_kernel_b.assign(tf.zeros(self.lora_kernel_b.shape))

    def get_config(self):
        config = super().get_config()
        if self.lora_rank:
            config.update(lora_rank=self.lora_rank, lora_alpha=self.lora_alpha)
        return config

    def _convolve(self, inputs, kernel):
        return _ops.conv2d(inputs, kernel, self.strides, self.padding.upper(),
                           data_format=self._tf_format, dilations=self.dilation_rate)


@_register
class DepthwiseConv2D(_Depthwise):
    """Drop-in for `keras.layers.DepthwiseConv2D`, on `TfOps>DepthwiseConv2dNative`.

    Kernel shape (kernel_h, kernel_w, input_channels, depth_multiplier), as Keras's; output
    channel c * depth_multiplier + m comes from input channel c. Strides and dilation may be
    combined, in either data format.
    """

    def __init__(self, kernel_size, strides=(1, 1), padding="valid", depth_multiplier=1,
                 data_format=None, dilation_rate=(1, 1), activation=None, use_bias=True,
                 depthwise_initializer="glorot_uniform", bias_initializer="zeros",
                 depthwise_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 depthwise_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(kernel_size, depth_multiplier=depth_multiplier,
                         depthwise_initializer=depthwise_initializer,
                         depthwise_regularizer=depthwise_regularizer,
                         depthwise_constraint=depthwise_constraint,
                         **_conv_args(kwargs, strides, padding, data_format, dilation_rate,
                                      activation, use_bias, bias_initializer, bias_regularizer,
                                      activity_regularizer, bias_constraint))

    def _convolve(self, inputs, kernel):
        return _ops.depthwise_conv2d_native(
            inputs, kernel, self._full(1, self.strides, 1), self.padding.upper(),
            data_format=self._tf_format, dilations=self._full(1, self.dilation_rate, 1))


class _Transpose:
    """Output lengths by Keras's rule for transposed convolutions, with output_padding."""

    def _init_output_padding(self, output_padding):
        if output_padding is None:
            self.output_padding = None
            return
        self.output_padding = _pair(output_padding, "output_padding", minimum=0)
        for axis, (pad, stride) in enumerate(zip(self.output_padding, self.strides)):
            if pad >= stride:
                raise ValueError(
                    "`output_padding` must be strictly less than `strides` for all dimensions. "
                    f"At dimension {axis}, `output_padding` is {pad} but `strides` is {stride}. "
                    f"Received: output_padding={self.output_padding}, strides={self.strides}"
                )

    def _output_lengths(self, lengths):
        pads = self.output_padding or (None, None)
        return tuple(_transpose_length(n, k, s, d, self.padding, p) for n, k, s, d, p in
                     zip(lengths, self.kernel_size, self.strides, self.dilation_rate, pads))

    def _sizes(self, inputs):
        """The output shape of the op as a list of ints, or an int32 tensor if not all known
        (unknown input dimensions are read with tf.shape)."""
        dynamic = tf.shape(inputs)
        dims = [d if d is not None else dynamic[i] for i, d in enumerate(inputs.shape)]
        shape = self._full(dims[0], self._output_lengths(self._spatial(dims)),
                           self._output_channels(dims[self._channel_axis]))
        if all(isinstance(d, int) for d in shape):
            return shape
        return tf.stack([tf.cast(d, tf.int32) for d in shape])

    def get_config(self):
        config = super().get_config()
        config["output_padding"] = self.output_padding
        return config


@_register
class Conv2DTranspose(_Transpose, _Filters):
    """Drop-in for `keras.layers.Conv2DTranspose`, on `TfOps>Conv2DBackpropInput`, plus `groups`.

    Kernel shape (kernel_h, kernel_w, filters // groups, input_channels), as Keras's for
    groups=1: the kernel of the Conv2D this layer transposes. Strides may be combined with
    dilation, and NCHW runs on CPU.
    """

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", output_padding=None,
                 data_format=None, dilation_rate=(1, 1), groups=1, activation=None,
                 use_bias=True, kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(filters, kernel_size, groups=groups,
                         kernel_initializer=kernel_initializer,
                         kernel_regularizer=kernel_regularizer,
                         kernel_constraint=kernel_constraint,
                         **_conv_args(kwargs, strides, padding, data_format, dilation_rate,
                                      activation, use_bias, bias_initializer, bias_regularizer,
                                      activity_regularizer, bias_constraint))
        self._init_output_padding(output_padding)

    def _kernel_shape(self, channels):
        return self.kernel_size + (self.filters // self.groups, channels)

    def _convolve(self, inputs, kernel):
        return _ops.conv2d_transpose(inputs, kernel, self._sizes(inputs), self.strides,
                                     padding=self.padding.upper(), data_format=self._tf_format,
                                     dilations=self.dilation_rate)


@_register
class DepthwiseConv2DTranspose(_Transpose, _Depthwise):
    """A depthwise transposed convolution: each input channel c is upsampled on its own into
    `depth_multiplier` output channels c * depth_multiplier + m, with kernel[:, :, c, m].

    Kernel shape (kernel_h, kernel_w, input_channels, depth_multiplier), the layout of
    DepthwiseConv2D's kernel; with depth_multiplier 1 it is the transpose of that
    DepthwiseConv2D. Output lengths follow Conv2DTranspose's rule (padding, output_padding).
    Runs on `TfOps>DepthwiseConv2dNativeBackpropInput` (multiplier 1) or a grouped
    `TfOps>Conv2DBackpropInput` with one group per input channel.
    """

    def __init__(self, kernel_size, strides=(1, 1), padding="valid", depth_multiplier=1,
                 output_padding=None, data_format=None, dilation_rate=(1, 1), activation=None,
                 use_bias=True, depthwise_initializer="glorot_uniform", bias_initializer="zeros",
                 depthwise_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 depthwise_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(kernel_size, depth_multiplier=depth_multiplier,
                         depthwise_initializer=depthwise_initializer,
                         depthwise_regularizer=depthwise_regularizer,
                         depthwise_constraint=depthwise_constraint,
                         **_conv_args(kwargs, strides, padding, data_format, dilation_rate,
                                      activation, use_bias, bias_initializer, bias_regularizer,
                                      activity_regularizer, bias_constraint))
        self._init_output_padding(output_padding)

    def _convolve(self, inputs, kernel):
        sizes = self._sizes(inputs)
        if self.depth_multiplier == 1:
            return _ops.depthwise_conv2d_backprop_input(
                sizes, kernel, inputs, self._full(1, self.strides, 1), self.padding.upper(),
                data_format=self._tf_format, dilations=self._full(1, self.dilation_rate, 1))
        # The transpose of a grouped convolution from C * M channels to C, one group per
        # channel: its filter [kh, kw, M, C] holds kernel[:, :, c, m] at [:, :, m, c].
        return _ops.conv2d_transpose(inputs, tf.transpose(kernel, [0, 1, 3, 2]), sizes,
                                     self.strides, padding=self.padding.upper(),
                                     data_format=self._tf_format, dilations=self.dilation_rate)
