"""Gradients of every op of the family, expressed only with ops of the family, so that
derivatives of any order stay inside kernels that support the whole feature matrix.

Sizes inputs (input_sizes, filter_sizes) and the shape-only inputs of the V2 ops get None.
"""
import tensorflow as tf

from tf_ops._loader import load_library

_lib = load_library()


def _attrs(op, cudnn=True):
    attrs = dict(
        strides=op.get_attr("strides"),
        padding=op.get_attr("padding"),
        explicit_paddings=op.get_attr("explicit_paddings"),
        data_format=op.get_attr("data_format"),
        dilations=op.get_attr("dilations"),
    )
    if cudnn:
        attrs["use_cudnn_on_gpu"] = op.get_attr("use_cudnn_on_gpu")
    return attrs


def _shape(t):
    return tf.shape(t, out_type=tf.int32)


@tf.RegisterGradient("TfOps>Conv2D")
def _conv2d_grad(op, grad):
    x, w = op.inputs
    a = _attrs(op)
    return [
        _lib.tf_ops_conv2d_backprop_input(_shape(x), w, grad, **a),
        _lib.tf_ops_conv2d_backprop_filter(x, _shape(w), grad, **a),
    ]


@tf.RegisterGradient("TfOps>Conv2DBackpropInput")
def _conv2d_backprop_input_grad(op, grad):
    _, w, dy = op.inputs
    a = _attrs(op)
    return [
        None,
        _lib.tf_ops_conv2d_backprop_filter(grad, _shape(w), dy, **a),
        _lib.tf_ops_conv2d(grad, w, **a),
    ]


@tf.RegisterGradient("TfOps>Conv2DBackpropInputV2")
def _conv2d_backprop_input_v2_grad(op, grad):
    _, w, dy = op.inputs
    a = _attrs(op)
    return [
        None,
        _lib.tf_ops_conv2d_backprop_filter_v2(grad, w, dy, **a),
        _lib.tf_ops_conv2d(grad, w, **a),
    ]


@tf.RegisterGradient("TfOps>Conv2DBackpropFilter")
def _conv2d_backprop_filter_grad(op, grad):
    x, _, dy = op.inputs
    a = _attrs(op)
    return [
        _lib.tf_ops_conv2d_backprop_input(_shape(x), grad, dy, **a),
        None,
        _lib.tf_ops_conv2d(x, grad, **a),
    ]


@tf.RegisterGradient("TfOps>Conv2DBackpropFilterV2")
def _conv2d_backprop_filter_v2_grad(op, grad):
    x, _, dy = op.inputs
    a = _attrs(op)
    return [
        _lib.tf_ops_conv2d_backprop_input_v2(x, grad, dy, **a),
        None,
        _lib.tf_ops_conv2d(x, grad, **a),
    ]


@tf.RegisterGradient("TfOps>DepthwiseConv2dNative")
def _depthwise_grad(op, grad):
    x, w = op.inputs
    a = _attrs(op, cudnn=False)
    return [
        _lib.tf_ops_depthwise_conv2d_native_backprop_input(_shape(x), w, grad, **a),
        _lib.tf_ops_depthwise_conv2d_native_backprop_filter(x, _shape(w), grad, **a),
    ]


@tf.RegisterGradient("TfOps>DepthwiseConv2dNativeBackpropInput")
def _depthwise_backprop_input_grad(op, grad):
    _, w, dy = op.inputs
    a = _attrs(op, cudnn=False)
    return [
        None,
        _lib.tf_ops_depthwise_conv2d_native_backprop_filter(grad, _shape(w), dy, **a),
        _lib.tf_ops_depthwise_conv2d_native(grad, w, **a),
    ]


@tf.RegisterGradient("TfOps>DepthwiseConv2dNativeBackpropFilter")
def _depthwise_backprop_filter_grad(op, grad):
    x, _, dy = op.inputs
    a = _attrs(op, cudnn=False)
    return [
        _lib.tf_ops_depthwise_conv2d_native_backprop_input(_shape(x), grad, dy, **a),
        None,
        _lib.tf_ops_depthwise_conv2d_native(x, grad, **a),
    ]
