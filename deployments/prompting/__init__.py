"""Requests -> engine inputs: chat templates and prompt encoders, tokenisation, history
normalisation and truncation, the router's preprocessing plan, sampling parameters and
decoding grammars."""
