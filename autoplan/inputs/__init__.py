"""What a plan is made for, read from the user's words and files: the model catalog (`catalog.json`),
Hugging Face `config.json` readers (`hf_config`, with the 2024-2025 families in `hf_recent`) and
clusters with their hardware profiles (`clusters`). Each turns a name or a file into the vocabulary of
`autoplan.specs`; none of them searches, renders or runs anything.

Empty on purpose: importing one reader loads only what that reader needs.
"""
