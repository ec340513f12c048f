"""Math prompts from generators: each draws numbers and one of several phrasings.

GENERATORS maps a name to a function(rng) -> user message. HELDOUT names generators whose problems
training never sees, so held-out tau on math measures unseen problem types.
"""

NAMES = ["Ana", "Ben", "Chloe", "Dev", "Elif", "Farid", "Grace", "Hiro", "Ines", "Jonas", "Kemi", "Liam", "Maya",
         "Nikolai", "Olga", "Priya", "Quinn", "Rosa", "Sami", "Tariq", "Uma", "Victor", "Wen", "Xavier", "Yara", "Zoe"]
ITEMS = ["notebooks", "apples", "tickets", "stickers", "marbles", "books", "cupcakes", "pens", "tiles", "bottles",
         "seeds", "coins", "cards", "candles", "bricks", "oranges", "shirts", "batteries", "plates", "buttons"]
SHOW = ["", " Show your work.", " Explain each step.", " Show the calculation.", " Give the answer and explain it.",
        " Think step by step.", " Please explain your reasoning."]


def _w(rng):
    return rng.choice(SHOW)


def arithmetic(rng):
    a, b, c = rng.randint(12, 999), rng.randint(3, 99), rng.randint(2, 500)
    return rng.choice([f"Compute {a} * {b} step by step.", f"What is {a} + {b} * {c}?{_w(rng)}",
                       f"Calculate ({a} - {c}) * {b}.{_w(rng)}", f"Divide {a * b} by {b}, using long division.",
                       f"What is {a} squared minus {b} squared?{_w(rng)}", f"Evaluate {a} - {b} + {c} * 2.{_w(rng)}"])


def fractions(rng):
    a, b, c, d = rng.randint(1, 9), rng.randint(2, 12), rng.randint(1, 9), rng.randint(2, 12)
    return rng.choice([f"Add the fractions {a}/{b} and {c}/{d} and simplify the result.{_w(rng)}",
                       f"What is {a}/{b} times {c}/{d}?{_w(rng)}", f"Simplify the fraction {a * 6}/{b * 6}.",
                       f"Which is larger, {a}/{b} or {c}/{d}? Explain.", f"Subtract {c}/{d} from {a}/{b}.{_w(rng)}",
                       f"Convert {a}/{b} to a decimal and to a percentage."])


def percentages(rng):
    p, x = rng.choice([5, 10, 12, 15, 20, 25, 30, 35, 40, 60, 75]), rng.randint(8, 400)
    item = rng.choice(["jacket", "laptop", "bicycle", "lamp", "pair of shoes", "phone", "sofa", "backpack"])
    return rng.choice([f"A {item} costs {x} dollars and is on sale for {p}% off. What is the sale price?{_w(rng)}",
                       f"What is {p}% of {x}?{_w(rng)}", f"A price rises from {x} to {x + p} euros. By what percent did it increase?",
                       f"After a {p}% raise, {rng.choice(NAMES)} earns {x * 100} per year. What was the salary before?{_w(rng)}",
                       f"{p} out of {x + p} students passed a test. What percentage failed?{_w(rng)}"])


def ratios(rng):
    a, b, n = rng.randint(1, 9), rng.randint(1, 9), rng.randint(2, 12)
    return rng.choice([f"The ratio of boys to girls in a club is {a}:{b}. If there are {a * n} boys, how many girls are there?",
                       f"Split {(a + b) * n * 10} dollars between two people in the ratio {a}:{b}.{_w(rng)}",
                       f"A recipe uses {a} cups of rice for {b + 1} people. How much rice for {n} people?{_w(rng)}",
                       f"A map scale is 1:{n * 10000}. How many kilometers is {a + b} cm on the map?"])


def averages(rng):
    xs = [rng.randint(1, 100) for _ in range(rng.randint(4, 8))]
    s = ", ".join(map(str, xs))
    return rng.choice([f"Find the mean, median and range of: {s}.{_w(rng)}", f"What is the average of {s}?",
                       f"{rng.choice(NAMES)} scored {s} on quizzes. What score is needed next to average {max(xs)}?",
                       f"Find the mode and the median of the list {s}, {xs[0]}.{_w(rng)}"])


def speed(rng):
    d1, t1, d2, t2 = rng.randint(20, 300), rng.randint(1, 5), rng.randint(20, 300), rng.randint(1, 4)
    return rng.choice([f"A cyclist rides {d1} km in {t1} hours, then {d2} km in {t2} hours. What is the average speed?{_w(rng)}",
                       f"Two trains leave stations {d1 + d2} km apart towards each other at {d1} km/h and {d2} km/h. When do they meet?",
                       f"How long does it take to drive {d1 * t1} miles at {d1} miles per hour?",
                       f"A runner keeps a pace of {t1 + 3} minutes per km. How long does a {d2 // 10 + 2} km run take?{_w(rng)}"])


def work_rate(rng):
    a, b = rng.randint(2, 12), rng.randint(2, 12)
    return rng.choice([f"One pipe fills a tank in {a} hours and another in {b} hours. How long do both together take?{_w(rng)}",
                       f"{a} painters paint a house in {b} days. How many days would {a + 2} painters need?",
                       f"A machine makes {a * 10} parts per hour. How many hours for {a * b * 35} parts?"])


def units(rng):
    x = rng.randint(2, 500)
    return rng.choice([f"Convert {x} kilometers to miles.", f"How many seconds are in {x} minutes and {x % 60} seconds?",
                       f"Convert {x} degrees Fahrenheit to Celsius.{_w(rng)}", f"How many milliliters are in {x / 10} liters?",
                       f"How many hours are there in {x} days?", f"Convert {x} pounds to kilograms.{_w(rng)}",
                       f"A field is {x} square meters. How many square feet is that?", f"How many minutes are in {x % 9 + 2} weeks?"])


def geometry(rng):
    a, b, r = rng.randint(2, 40), rng.randint(2, 40), rng.randint(1, 20)
    return rng.choice([f"A rectangle has an area of {a * b} square meters and a width of {a} m. What is its perimeter?{_w(rng)}",
                       f"Find the area and circumference of a circle with radius {r} cm.",
                       f"A right triangle has legs {a} and {b}. How long is the hypotenuse?{_w(rng)}",
                       f"What is the volume of a box that is {a} by {b} by {r} cm?",
                       f"A cylinder has radius {r} and height {a}. What is its volume?{_w(rng)}",
                       f"What is the sum of the interior angles of a polygon with {r % 10 + 3} sides?",
                       f"A square has a diagonal of {a} cm. What is its area?{_w(rng)}"])


def linear(rng):
    x, a, b = rng.randint(-12, 20), rng.randint(2, 9), rng.randint(1, 30)
    return rng.choice([f"Solve {a}x - {b} = {a * x - b}.{_w(rng)}", f"Find x if {a}(x + {b}) = {a * (x + b)}.",
                       f"Solve for y: y/{a} + {b} = {x + b}.{_w(rng)}", f"Solve the inequality {a}x + {b} > {a * x + b}.",
                       f"If {a} more than twice a number is {2 * x + a}, what is the number?{_w(rng)}"])


def systems(rng):
    x, y = rng.randint(-5, 12), rng.randint(-5, 12)
    a, b, c, d = rng.randint(1, 6), rng.randint(1, 6), rng.randint(1, 6), rng.randint(-6, -1)
    return rng.choice([f"Solve the system: {a}x + {b}y = {a * x + b * y} and {c}x {d:+d}y = {c * x + d * y}.{_w(rng)}",
                       f"Adult tickets cost {a + 5} and child tickets {b}. {x + y + 20} tickets sold for "
                       f"{(a + 5) * (x + 10) + b * (y + 10)}. How many of each?"])


def quadratic(rng):
    r1, r2 = rng.randint(-9, 9), rng.randint(-9, 9)
    return rng.choice([f"Solve x^2 {-(r1 + r2):+d}x {r1 * r2:+d} = 0.{_w(rng)}",
                       f"Factor the expression x^2 {-(r1 + r2):+d}x {r1 * r2:+d}.",
                       f"Find the vertex of the parabola y = x^2 {-(r1 + r2):+d}x {r1 * r2:+d}.{_w(rng)}"])


def sequences(rng):
    a, d, n = rng.randint(1, 20), rng.randint(2, 9), rng.randint(8, 60)
    return rng.choice([f"What is the {n}th term of the sequence {a}, {a + d}, {a + 2 * d}, ...?{_w(rng)}",
                       f"Find the sum of the first {n} terms of {a}, {a + d}, {a + 2 * d}, ...",
                       f"What comes next: {a}, {a * 2}, {a * 4}, {a * 8}, ...? Then give the formula.",
                       f"Compute the sum of all even numbers from 2 to {2 * n}.{_w(rng)}",
                       f"Find the sum of the integers from {a} to {a + n}.{_w(rng)}"])


def probability(rng):
    r, b, g = rng.randint(1, 9), rng.randint(1, 9), rng.randint(0, 6)
    return rng.choice([f"A box holds {r} red, {b} blue and {g} green balls. Two are drawn without replacement. "
                       f"What is the probability both are red?{_w(rng)}",
                       f"What is the probability of rolling a sum of {rng.randint(2, 12)} with two dice?",
                       f"A coin is flipped {r + 2} times. What is the probability of exactly {min(r, 3)} heads?{_w(rng)}",
                       f"What is the probability of drawing a {rng.choice(['heart', 'king', 'face card', 'red ace'])} "
                       f"from a standard deck of 52 cards?"])


def combinatorics(rng):
    n, k = rng.randint(5, 15), rng.randint(2, 4)
    return rng.choice([f"In how many ways can {k} people be chosen from {n}?{_w(rng)}",
                       f"How many different arrangements of the letters in the word {rng.choice(['LEVEL', 'BANANA', 'PEPPER', 'TOMATO', 'STREET'])} are there?",
                       f"A menu has {k + 2} starters, {n} mains and {k} desserts. How many three-course meals are possible?",
                       f"How many {k + 2}-digit PIN codes have no repeated digit?{_w(rng)}"])


def number_theory(rng):
    a, b = rng.randint(12, 400), rng.randint(6, 200)
    return rng.choice([f"Find the greatest common divisor of {a} and {b} with the Euclidean algorithm.",
                       f"What is the least common multiple of {a % 40 + 4} and {b % 30 + 3}?{_w(rng)}",
                       f"Write {a * 6} as a product of prime factors.", f"Is {a * 2 + 1} a prime number? Explain.",
                       f"What is the remainder when {a ** 2} is divided by {b % 17 + 3}?{_w(rng)}",
                       f"How many positive divisors does {a} have?"])


def money(rng):
    p, r, t = rng.randint(1, 50) * 100, rng.choice([2, 3, 4, 5, 6, 8]), rng.randint(2, 10)
    return rng.choice([f"What is the simple interest on {p} dollars at {r}% per year for {t} years?",
                       f"{rng.choice(NAMES)} pays with a {rng.choice([20, 50, 100])} note for items costing "
                       f"{r + 0.75:.2f}, {t + 0.4:.2f} and {r * t / 10:.2f}. How much change?{_w(rng)}",
                       f"A dinner bill of {p / 20:.2f} is split between {t} friends with a {r * 3}% tip. How much each?",
                       f"{rng.choice(NAMES)} earns {r + 11} dollars an hour and works {t + 30} hours a week. Weekly pay?"])


def compound(rng):
    p, r, t = rng.randint(1, 50) * 100, rng.choice([2, 3, 4, 5, 6, 8]), rng.randint(2, 10)
    return rng.choice([f"{p} dollars is invested at {r}% interest compounded yearly. How much after {t} years?{_w(rng)}",
                       f"How many years does it take money to double at {r}% compounded annually? Use logarithms.",
                       f"A car worth {p * 10} loses {r * 2}% of its value every year. What is it worth after {t} years?"])


def ages(rng):
    a, d, k = rng.randint(5, 40), rng.randint(2, 30), rng.randint(2, 4)
    n1, n2 = rng.sample(NAMES, 2)
    return rng.choice([f"{n1} is {d} years older than {n2}. In {a} years their ages add up to {2 * a + 2 * d + d + 10}. How old is each now?",
                       f"{n1} is {k} times as old as {n2}. In {a % 10 + 2} years {n1} will be {k * 10 + a % 10 + 2}. How old is {n2} now?{_w(rng)}"])


def mixtures(rng):
    a, b, x = rng.choice([10, 20, 30, 40]), rng.choice([50, 60, 70, 80]), rng.randint(2, 20)
    return rng.choice([f"How many liters of a {a}% salt solution must be mixed with {x} liters of a {b}% solution "
                       f"to get a {(a + b) // 2}% solution?{_w(rng)}",
                       f"Coffee at {a // 10 + 4} dollars/kg is mixed with coffee at {b // 10 + 4} dollars/kg to make "
                       f"{x * 5} kg worth {(a + b) // 20 + 4} dollars/kg. How much of each?"])


def clocks(rng):
    h, m = rng.randint(1, 12), rng.choice([0, 10, 15, 20, 30, 40, 45, 50])
    d = rng.randint(35, 500)
    return rng.choice([f"What is the angle between the hour and minute hands at {h}:{m:02d}?{_w(rng)}",
                       f"A meeting starts at {h}:{m:02d} and lasts {d} minutes. When does it end?",
                       f"If today is {rng.choice(['Monday', 'Wednesday', 'Friday', 'Sunday'])}, what day is it {d} days from now?{_w(rng)}"])


def exponents(rng):
    a, b, c = rng.randint(2, 9), rng.randint(2, 6), rng.randint(2, 5)
    return rng.choice([f"Simplify ({a}^{b})^{c} / {a}^{b + c}.", f"What is the square root of {(a * b) ** 2}?",
                       f"Solve {a}^x = {a ** b}.{_w(rng)}", f"Compute log base {a} of {a ** c}.",
                       f"Write {a * 10 ** (b + 3)} in scientific notation."])


def word_items(rng):
    n, a, b, c = rng.choice(NAMES), rng.randint(10, 90), rng.randint(2, 30), rng.randint(2, 12)
    it = rng.choice(ITEMS)
    return rng.choice([f"{n} has {a} {it}, gives {b} to a friend and then packs the rest into boxes of {c}. "
                       f"How many boxes are full, and how many {it} are left?{_w(rng)}",
                       f"{n} buys {c} packs of {it} with {b} in each pack and uses {a % (b * c) + 1}. How many remain?",
                       f"A shop sells {it} at {c} for {b} dollars. How much do {a} {it} cost?{_w(rng)}"])


GENERATORS = {f.__name__: f for f in (arithmetic, fractions, percentages, ratios, averages, speed, work_rate, units,
                                      geometry, linear, systems, quadratic, sequences, probability, combinatorics,
                                      number_theory, money, compound, ages, mixtures, clocks, exponents, word_items)}
HELDOUT = ("ages", "mixtures", "clocks")
assert all(h in GENERATORS for h in HELDOUT)
