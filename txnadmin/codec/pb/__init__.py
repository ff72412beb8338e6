"""Protobuf modules generated from proto/ by proto/generate.py."""
