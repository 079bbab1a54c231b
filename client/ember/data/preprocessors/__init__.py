"""Ember's `ray.data.preprocessors`: fit statistics on a Dataset in one aggregation pass, then
transform Datasets or batches, with Ray's class names, arguments, stats keys and output
columns.

    from ember.data.preprocessors import Chain, OneHotEncoder, StandardScaler
    pp = Chain(StandardScaler(["x"]), OneHotEncoder(["color"]))
    train = pp.fit_transform(train_ds)
    batch = pp.transform_batch(pandas_df)
    pp2 = Preprocessor.deserialize(pp.serialize())
"""
from __future__ import annotations

from ._base import Preprocessor, PreprocessorNotFittedException
from .chain import Chain
from .discretizer import CustomKBinsDiscretizer, UniformKBinsDiscretizer
from .encoder import Categorizer, LabelEncoder, MultiHotEncoder, OneHotEncoder, OrdinalEncoder
from .imputer import SimpleImputer
from .numeric import Concatenator, Normalizer, PowerTransformer
from .scaler import MaxAbsScaler, MinMaxScaler, RobustScaler, StandardScaler
from .text import CountVectorizer, FeatureHasher, HashingVectorizer, Tokenizer

__all__ = ["Categorizer", "Chain", "Concatenator", "CountVectorizer", "CustomKBinsDiscretizer",
           "FeatureHasher",
           "HashingVectorizer", "LabelEncoder", "MaxAbsScaler", "MinMaxScaler", "MultiHotEncoder",
           "Normalizer", "OneHotEncoder",
           "OrdinalEncoder", "PowerTransformer", "Preprocessor", "PreprocessorNotFittedException",
           "RobustScaler", "SimpleImputer", "StandardScaler", "Tokenizer",
           "UniformKBinsDiscretizer"]
