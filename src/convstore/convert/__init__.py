"""Conversions from the shapes providers, SDKs and agent runtimes use into convstore blocks."""
