"""What a translator does with text, above the search (decode/): the Translator, documents and their sentences,
markup, word alignment, and where a glossary's terms go."""
