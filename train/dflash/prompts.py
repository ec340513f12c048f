"""Training prompts for DFlash drafters: templates x topic lists, four categories.

Generated here, never copied from bench/prompts.jsonl (the held-out benchmark). Deterministic for a
seed, so the same command always yields the same prompt set.
"""

import random

LANGS = ["Python", "C++", "Rust", "Go", "JavaScript", "TypeScript", "Java", "C", "Bash", "SQL"]
CODE_TASKS = [
    "reverses a singly linked list", "parses a CSV line with quoted fields", "computes the nth Fibonacci number iteratively",
    "checks whether a string is a palindrome", "merges two sorted arrays", "implements binary search",
    "counts word frequencies in a text", "implements an LRU cache", "validates an email address",
    "flattens a nested list", "computes the GCD of two integers", "converts a Roman numeral to an integer",
    "finds the longest common prefix of a list of strings", "implements a stack with a min() query",
    "rotates a matrix by 90 degrees", "removes duplicates from a sorted array", "implements quicksort",
    "reads a file and prints the number of lines", "computes a moving average over a window",
    "checks if a number is prime", "implements breadth-first search on a graph", "transposes a matrix",
    "formats a number with thousands separators", "implements a simple tokenizer for arithmetic expressions",
    "finds the k largest elements", "serializes a binary tree to a string", "debounces a function call",
    "implements a ring buffer", "computes the Levenshtein distance", "groups anagrams together",
    "parses command-line flags", "implements a thread-safe counter", "computes the median of a stream",
    "validates balanced parentheses", "converts Celsius to Fahrenheit for a table of values",
    "implements matrix multiplication", "finds all permutations of a string", "implements a trie",
    "implements Dijkstra's shortest path", "retries an HTTP request with exponential backoff",
]
CODE_TEMPLATES = [
    "Write a {lang} function that {task}.",
    "Implement code in {lang} that {task}. Include a short example of its use.",
    "Show me a {lang} program that {task}, with comments.",
    "How would I write something in {lang} that {task}? Explain briefly, then give the code.",
    "Write unit tests in {lang} for a function that {task}.",
    "Explain step by step how an algorithm that {task} works, then write it in {lang}.",
]
MATH_ITEMS = [
    "A store sells pencils at {a} cents each. How much do {b} pencils cost in dollars?",
    "Tom has {a} apples and gives away {b}. He then buys {c} more. How many apples does he have?",
    "What is {a} times {b}, minus {c}? Show your work.",
    "A train travels at {a} km/h for {b} hours. How far does it go?",
    "Compute the sum of all integers from 1 to {a}.",
    "A rectangle is {a} cm long and {b} cm wide. What are its area and perimeter?",
    "If {a} workers build a wall in {b} days, how long do {c} workers take?",
    "What is {a}% of {b}?",
    "Solve for x: {a}x + {b} = {c}.",
    "A recipe needs {a} grams of flour for {b} cookies. How much flour for {c} cookies?",
    "Is {a} divisible by {b}? Explain.",
    "What is the average of {a}, {b} and {c}?",
    "A car uses {a} liters of fuel per 100 km. How much fuel for {b} km?",
    "Convert {a} minutes into hours and minutes.",
    "Find the least common multiple of {a} and {b}.",
]
CHAT_TOPICS = [
    "photosynthesis", "how vaccines work", "the water cycle", "black holes", "inflation in economics",
    "the causes of World War I", "how a CPU cache works", "public key cryptography", "the French Revolution",
    "machine learning overfitting", "how to make bread", "time management", "the theory of evolution",
    "plate tectonics", "how the internet routes packets", "the difference between weather and climate",
    "how compilers work", "the rules of chess", "meditation", "how to learn a new language",
    "the immune system", "renewable energy", "the history of the printing press", "quantum entanglement",
    "supply and demand", "sleep and memory", "how git branches work", "the Roman Empire", "volcanoes",
    "how databases index data", "healthy eating", "the stock market", "electric cars", "coral reefs",
    "how airplanes fly", "garbage collection in programming languages", "the moon landing", "recycling",
    "the human heart", "how to write a good resume", "how batteries store energy", "the Silk Road",
    "why the sky is blue", "how bees communicate", "the basics of personal finance", "jet lag",
    "how search engines rank pages", "the Renaissance", "antibiotic resistance", "how to give feedback",
    "the rise of smartphones", "earthquakes", "how muscles grow", "the history of jazz", "desert ecosystems",
    "how GPS works", "the Industrial Revolution", "habits and motivation", "how tides work", "minimalism",
    "open source software", "the solar system", "caffeine", "how elections work", "rainforests",
]
CHAT_TEMPLATES = [
    "Explain {topic} to a ten-year-old.", "Give me a short overview of {topic}.",
    "What are three common misconceptions about {topic}?", "Write a short paragraph about {topic}.",
    "Summarize the key ideas of {topic} in a bulleted list.", "Why does {topic} matter? Answer briefly.",
    "Write a haiku and then a short explanation about {topic}.", "What questions should a beginner ask about {topic}?",
    "I keep hearing about {topic}. What is it, in plain words?", "Write a short blog post introduction about {topic}.",
    "Compare two different views on {topic}.", "Give me five fun facts about {topic}.",
    "How would you teach {topic} in a 30-minute class?", "What is the history behind {topic}?",
]
EDIT_TEXTS = [
    "The quick brown fox jumps over the lazy dog. It was a sunny day and everyone was happy.",
    "def add(a, b):\n    return a+b\n\nprint(add(2,3))",
    "Dear team, the meeting is moved to thursday at 3pm. please bring you're laptops. thanks, Anna",
    "for (int i = 0; i < n; i++) {\n  sum += values[i];\n}\nprintf(\"%d\", sum);",
    "Our product is very good and it is very fast and it is very cheap and people like it very much.",
    "SELECT name, age FROM users WHERE age > 30 ORDER BY name;",
    "function greet(name) { console.log('Hello ' + name) }",
    "I has went to the store yesterday and buyed three apple and a bread.",
    "The results shows that the new method are more accurate then the old one in most case.",
    "x = [1, 2, 3]\nfor i in range(len(x)):\n    print(x[i] * 2)",
    "Meeting notes: budget approved. hiring paused. next review in march. Bob to send report.",
    "Customer wrote: the package arrived late and the box was damaged, I want a refund or a replacement.",
    "let total = 0; for (const item of cart) { total = total + item.price * item.qty } return total",
    "Step 1 open the lid. Step 2 pour water. step 3 close lid and press the button wait five minute.",
    "class Account:\n    def __init__(self):\n        self.b = 0\n    def dep(self, x):\n        self.b += x",
    "Our quarterly revenue grew 12 percent, driven by new customers in Europe, while costs stayed flat.",
    "if (x > 0) { if (y > 0) { return 1; } else { return 2; } } else { return 3; }",
    "Hi John, just checking in about the report. Can you send it by friday? Let me know if you need help.",
    "struct Point { int x; int y; };\nint dist2(Point a, Point b) { return (a.x-b.x)*(a.x-b.x)+(a.y-b.y)*(a.y-b.y); }",
]
EDIT_TEMPLATES = [
    "Fix the grammar and spelling in the following text:\n\n{text}",
    "Rewrite the following to be more concise:\n\n{text}",
    "Translate the following into French:\n\n{text}",
    "Convert the following into a bulleted list:\n\n{text}",
    "Rename the variables in this snippet to be more descriptive and return the full snippet:\n\n{text}",
    "Add comments to the following:\n\n{text}",
    "Rewrite the following in a formal tone:\n\n{text}",
    "Port the following code to Python, or if it is already Python, to JavaScript:\n\n{text}",
    "Summarize the following in one sentence:\n\n{text}",
    "Rewrite the following so that a child can understand it:\n\n{text}",
    "Find any mistakes in the following and list them:\n\n{text}",
    "Make the following friendlier:\n\n{text}",
]


def make_prompts(n, seed):
    """Returns n (category, user message) pairs, balanced over the four categories."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        cat = ["code", "math", "chat", "edit"][i % 4]
        if cat == "code":
            msg = rng.choice(CODE_TEMPLATES).format(lang=rng.choice(LANGS), task=rng.choice(CODE_TASKS))
        elif cat == "math":
            msg = rng.choice(MATH_ITEMS).format(a=rng.randint(2, 99), b=rng.randint(2, 60), c=rng.randint(2, 40))
        elif cat == "chat":
            msg = rng.choice(CHAT_TEMPLATES).format(topic=rng.choice(CHAT_TOPICS))
        else:
            msg = rng.choice(EDIT_TEMPLATES).format(text=rng.choice(EDIT_TEXTS))
        out.append((cat, msg))
    return out
