"""Raw-text prompts for the greedy-equality test (no chat template: the test must not depend on it).

Varied on purpose: code, math, chat-style turns, lists, prose, multilingual and structured text, so that
the continuations exercise different parts of the vocabulary and attention patterns.
"""

PROMPTS = [
    # code
    "def quicksort(arr):\n    \"\"\"Sort a list of integers.\"\"\"\n",
    "#include <stdio.h>\n\nint main(void) {\n    int total = 0;\n    for (int i = 0; i < 10; ++i) {\n",
    "// TypeScript: debounce a function\nexport function debounce<T extends (...args: any[]) => void>(",
    "SELECT customers.name, COUNT(orders.id) AS n_orders\nFROM customers\n",
    # math
    "Question: A train travels 120 km in 1.5 hours. What is its average speed in km/h?\nAnswer:",
    "The derivative of x^3 + 2x^2 - 5x + 7 with respect to x is",
    "1, 1, 2, 3, 5, 8, 13, 21,",
    # chat-like (rendered as plain text)
    "User: What is the capital of France?\nAssistant:",
    "User: Can you give me three tips for sleeping better?\nAssistant: Sure! Here are three tips:\n1.",
    # lists / structured
    "A shopping list for a week of healthy meals:\n-",
    "{\n  \"name\": \"salvo\",\n  \"version\": \"0.1.0\",\n  \"dependencies\": {\n",
    # prose / knowledge / multilingual
    "The history of the printing press begins in",
    "Translate to French: \"The weather is nice today.\"\nFrench:",
]
